"""``runtime.distributed`` in one real process (a fresh interpreter per test, so torch's global
state and the hooks stay out of pytest's): the group is the same within a generation and formed
again for a new one with real gloo; Kubetorch's init/destroy pattern runs call after call on the
kept store; NCCL's argument path; bad arguments name the field."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from runtime import distributed
from runtime.agent.errors import ConfigError
from runtime.local.launch_plan import free_port
from tests.conftest import ROOT

pytestmark = pytest.mark.process


def run(code: str, **env: str) -> dict:
    """Run ``code`` (which prints one JSON line last) in a fresh interpreter of one rank's world."""
    environ = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0",
               "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port("127.0.0.1")), "TRAINPLANE_GENERATION": "1",
               **env}
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                            timeout=300, env=environ, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_the_group_is_the_same_within_a_generation_and_formed_again_for_a_new_one():
    seen = run('''
        import json, os
        import torch, torch.distributed as dist
        from runtime import distributed
        first = distributed.process_group()
        again = distributed.process_group()
        same = dist.group.WORLD
        os.environ.update(TRAINPLANE_GENERATION="2", MASTER_PORT=os.environ["NEXT_PORT"])
        moved = distributed.process_group()
        x = torch.ones(1); dist.all_reduce(x)
        print(json.dumps({"fresh": [first.fresh, again.fresh, moved.fresh], "backend": moved.backend,
                          "generations": [first.generation, moved.generation], "replaced": dist.group.WORLD is not same,
                          "sum": x.item()}))
    ''', NEXT_PORT=str(free_port("127.0.0.1")))
    assert seen == {"fresh": [True, False, True], "backend": "gloo", "generations": [1, 2], "replaced": True,
                    "sum": 1.0}


def test_init_and_destroy_in_every_call_reuse_the_kept_store_with_a_fresh_prefix():
    seen = run('''
        import json
        import torch, torch.distributed as dist
        from runtime.agent.execution import torchhooks
        torchhooks.install_on_import()
        import torch.distributed.rendezvous
        rounds = []
        for _ in range(4):
            dist.init_process_group("gloo")
            model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1))
            model(torch.randn(4)).sum().backward()
            dist.destroy_process_group()
            torchhooks.collect()
            rounds.append(torchhooks._State.store.store.add("trainplane/rendezvous/0", 0))
        print(json.dumps({"rounds": rounds, "destroy": dist.destroy_process_group.__module__}))
    ''')
    assert seen == {"rounds": [1, 2, 3, 4], "destroy": "runtime.agent.execution.torchhooks"}


def test_nccl_is_asked_for_with_this_ranks_device():
    """No GPU here: torch's ``init_process_group`` and ``cuda.set_device`` are replaced by recorders,
    so only the arguments ``process_group`` passes for NCCL are checked."""
    seen = run('''
        import json
        import torch, torch.distributed as dist
        from runtime import distributed
        calls = {}
        torch.cuda.set_device = lambda device: calls.setdefault("set_device", str(device))
        dist.init_process_group = lambda **kw: calls.setdefault("init", {k: str(v) for k, v in kw.items()})
        dist.get_rank = lambda: 0
        dist.get_world_size = lambda: 2
        group = distributed.process_group(backend="nccl", timeout=30)
        print(json.dumps({**calls, "backend": group.backend}))
    ''', LOCAL_RANK="1")
    assert seen == {"set_device": "cuda:1", "backend": "nccl",
                    "init": {"backend": "nccl", "init_method": "env://", "timeout": "0:00:30",
                             "device_id": "cuda:1"}}


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"backend": "mpi"}, r"^backend='mpi' is invalid: use one of gloo, nccl$"),
    ({"timeout": 0}, r"^timeout=0 is invalid: use seconds > 0"),
])
def test_bad_arguments_name_the_field(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        distributed.process_group(**kwargs)


def test_kept_state_is_one_dict_per_name():
    kept = distributed.kept("test-kept")
    kept["x"] = 1
    assert distributed.kept("test-kept") is kept and distributed.kept("other") is not kept
    with pytest.raises(ConfigError, match=r"^name='' is invalid: name the kept state"):
        distributed.kept("")
