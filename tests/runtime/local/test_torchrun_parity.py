"""The launcher against the real torchrun of the pinned torch (2.13.0): the same command line, the
same process environment, torch's ``@record`` error file, the ``OMP_NUM_THREADS`` rule, signals and
stdin. torchrun runs for real beside the launcher (two c10d agents on loopback)."""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from runtime.agent import contract
from runtime.local import launch_plan
from runtime.local.launch import IGNORED, build_parser, validate
from tests.conftest import ROOT, Lines, launch, project_env, wait_until

pytestmark = pytest.mark.process

DUMP = """
import json, os, sys
with open(os.path.join(sys.argv[1], "rank-" + os.environ["RANK"] + ".json"), "w") as f:
    json.dump(dict(os.environ), f)
"""


def torchrun_envs(script: Path, out: Path, shape: tuple[int, int], env: dict[str, str]) -> list[dict[str, str]]:
    """Every worker's environment under two (or one) real torchrun agents, c10d on loopback."""
    nodes, nproc = shape
    port = launch_plan.free_port("127.0.0.1")
    common = ["--nnodes", str(nodes), "--nproc-per-node", str(nproc), "--rdzv-backend", "c10d",
              "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", "parity", "--max-restarts", "1"]
    agents = [subprocess.Popen([sys.executable, "-m", "torch.distributed.run", *common,
                                "--rdzv-conf", f"is_host={i == 0}", str(script), str(out)],
                               cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
              for i in range(nodes)]
    for agent in agents:
        _, err = agent.communicate(timeout=120)
        assert agent.returncode == 0, err
    return [json.loads(p.read_text()) for p in sorted(out.glob("rank-*.json"))]


def _same(values: list[str]) -> bool:
    return len(set(values)) == 1


MEANING = {
    # What each variable torchrun sets means, checked over all processes of one launch. Values that
    # are per-launch ids, addresses, ports or paths may differ between torchrun and trainplane.
    "RANK": "identical", "LOCAL_RANK": "identical", "GROUP_RANK": "identical", "ROLE_RANK": "identical",
    "WORLD_SIZE": "identical", "LOCAL_WORLD_SIZE": "identical", "GROUP_WORLD_SIZE": "identical",
    "ROLE_WORLD_SIZE": "identical", "ROLE_NAME": "identical", "TORCHELASTIC_RESTART_COUNT": "identical",
    "TORCHELASTIC_MAX_RESTARTS": "identical", "OMP_NUM_THREADS": "identical",
    "TORCHELASTIC_SIGNALS_TO_HANDLE": "identical", "TORCH_NCCL_ASYNC_ERROR_HANDLING": "identical",
    "TORCHELASTIC_RUN_ID": "identical",  # --rdzv-id is the job id under both
    "MASTER_ADDR": "one address", "MASTER_PORT": "one port",
    "TORCHELASTIC_ERROR_FILE": "a file per process",
    # torchrun's c10d agent hosts the TCPStore (True); trainplane's agents host none, so env://
    # lets rank 0 host it (False): the variable tells torch.distributed which, in both.
    "TORCHELASTIC_USE_AGENT_STORE": "who hosts the store",
}


@pytest.mark.parametrize("shape", [(2, 2), (1, 2)])
def test_every_variable_torchrun_sets_is_set_with_the_same_meaning(tmp_path: Path, script, shape: tuple[int, int]):
    env = {k: v for k, v in project_env().items() if k != "OMP_NUM_THREADS"}
    path = script(DUMP)
    theirs_dir, ours_dir = tmp_path / "torchrun", tmp_path / "trainplane"
    theirs_dir.mkdir()
    ours_dir.mkdir()
    theirs = torchrun_envs(path, theirs_dir, shape, env)
    nodes, nproc = shape
    # The same per-node command lines, torchrun's rendezvous options included, with the launcher in
    # torchrun's place: one launcher per node, each running its own node (runtime.local.hosts).
    port = launch_plan.free_port("127.0.0.1")
    launchers = [subprocess.Popen(
        [sys.executable, "-m", "runtime", "launch", "--nnodes", str(nodes), "--nproc-per-node", str(nproc),
         "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", "parity", "--max-restarts",
         "1", "--master-port", "0", str(path), str(ours_dir)],
        cwd=ROOT, env={**env, contract.TOKEN: "parity-token"}, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        text=True) for _ in range(nodes)]
    stderrs = [launcher.communicate(timeout=120)[1] for launcher in launchers]
    assert [launcher.returncode for launcher in launchers] == [0] * nodes, stderrs
    ours = [json.loads(p.read_text()) for p in sorted(ours_dir.glob("rank-*.json"))]
    assert len(theirs) == len(ours) == nodes * nproc
    added = sorted({k for e in theirs for k in e if e[k] != env.get(k)})
    assert set(added) <= set(MEANING), f"torchrun sets variables this test does not know: {set(added) - set(MEANING)}"
    assert {"RANK", "OMP_NUM_THREADS" if nproc > 1 else "RANK", "TORCHELASTIC_ERROR_FILE"} <= set(added)
    for name in added:
        mine = [e.get(name) for e in ours]
        assert None not in mine, f"trainplane does not set {name}"
        kind = MEANING[name]
        if kind == "identical":
            key = ("RANK", name)
            assert sorted((e["RANK"], e[name]) for e in ours) == sorted((e["RANK"], e[name]) for e in theirs), key
        elif kind in ("one address", "one port"):
            assert _same(mine) and (mine[0].isdigit() if kind == "one port" else mine[0] in ours[0]["POD_IPS"])
        elif kind == "a file per process":
            assert len(set(mine)) == len(mine) and all(p.endswith("error.json") and Path(p).parent.is_dir()
                                                       for p in mine)
        else:
            assert [e[name] for e in theirs] == ["True"] * len(theirs) and mine == ["False"] * len(mine)
    assert all("ignoring torchrun options with no meaning here: --rdzv-backend=c10d (" in e for e in stderrs)


def _torch_options() -> list[argparse.Action]:
    from torch.distributed.run import get_args_parser

    return [a for a in get_args_parser()._actions if a.option_strings and a.dest != "help"]


HANDLED = {
    "nnodes", "nproc_per_node", "max_restarts", "module", "no_python", "run_path", "log_dir", "redirects", "tee",
    "local_ranks_filter", "duplicate_stdout_filters", "duplicate_stderr_filters", "master_port", "role",
    "signals_to_handle", "shutdown_timeout", "virtual_local_rank", "rdzv_id",
}
"""torchrun options (by torchrun's dest) that do here what they do under torchrun."""


def test_every_torchrun_option_is_handled_or_named_as_ignored():
    """Walks ``torch.distributed.run.get_args_parser()``: an option a new torch adds fails this test
    until the launcher takes it (in every spelling) and it is listed as handled or ignored."""
    ours = build_parser()
    theirs = _torch_options()
    unknown = [a.option_strings for a in theirs if a.dest not in HANDLED and a.dest not in IGNORED]
    assert not unknown, f"torchrun options neither handled nor ignored: {unknown}"
    for action in theirs:
        for spelling in action.option_strings:
            mine = ours._option_string_actions.get(spelling)
            assert mine is not None, f"{spelling} is not accepted"
            assert (mine.nargs == 0) == (action.nargs == 0), f"{spelling}: flag or value differs from torchrun"
            if action.choices:
                choices = [str(c) for c in action.choices]
                assert [c for c in choices if _refusal(ours, spelling, c) is None] == choices, spelling
                assert "must be one of" in (_refusal(ours, spelling, "not-" + choices[0]) or ""), spelling


def _refusal(parser: argparse.ArgumentParser, spelling: str, value: str) -> str | None:
    """What ``parser`` prints refusing ``spelling=value`` before a script, or None when it takes it (the launcher
    refuses a choice flag's other values in the spec's words, through its type function, not argparse's choices)."""
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            parser.parse_args([f"{spelling}={value}", "train.py"])
    except SystemExit:
        return err.getvalue()
    return None


def _sample(action: argparse.Action) -> list[str]:
    """A value of the form torchrun takes for the option (its default, or one of its choices)."""
    if action.nargs == 0:
        return [action.option_strings[0]]
    samples = {"nnodes": "1", "nproc_per_node": "auto", "redirects": "0:3", "tee": "1", "local_ranks_filter": "0",
               "signals_to_handle": "SIGTERM,SIGUSR1", "master_port": "0", "shutdown_timeout": "3",
               "duplicate_stdout_filters": "loss,,acc", "duplicate_stderr_filters": "warn", "log_dir": "logs"}
    value = samples.get(action.dest) or (action.choices[0] if action.choices else action.default)
    return [f"{action.option_strings[-1]}={value if value not in (None, []) else 'x'}"]


@pytest.mark.parametrize("action", _torch_options(), ids=lambda a: a.option_strings[0])
def test_each_torchrun_option_parses_with_a_value_of_torchruns_form(action: argparse.Action, tmp_path: Path):
    script = tmp_path / "train.py"
    script.write_text("")
    parser = build_parser()
    ns = parser.parse_args([*_sample(action), str(script), "--lr", "1"])
    validate(parser, ns)
    assert (ns.script, ns.args) == (str(script), ["--lr", "1"])


@pytest.mark.parametrize(("value", "count"), [("3", 3), ("cpu", len(os.sched_getaffinity(0))),
                                              ("auto", len(os.sched_getaffinity(0)))])
def test_nproc_per_node_counts_as_torchrun_does_on_a_cpu_machine(value: str, count: int, tmp_path: Path):
    script = tmp_path / "train.py"
    script.write_text("")
    parser = build_parser()
    ns = parser.parse_args(["--nproc-per-node", value, str(script)])
    validate(parser, ns)
    assert ns.num_proc == count


RECORDED = """
import os
from torch.distributed.elastic.multiprocessing.errors import record

@record
def main():
    if os.environ["RANK"] == "1":
        raise ValueError("bad batch 7")

main()
"""


def test_a_recorded_exception_is_the_root_cause_instead_of_the_stderr_tail(script):
    path = script(RECORDED, name="recorded.py")
    result = launch("--nnodes", "1", "--nproc-per-node", "2", "--master-port", "0", str(path))
    assert result.returncode == 1
    report = next(line for line in result.stderr.splitlines() if "job failed" in line)
    assert f"rank 1 (node 0 at 127.0.0.2, local rank 1) exited with code 1; its recorded error " \
           f"(TORCHELASTIC_ERROR_FILE): ValueError: bad batch 7 (raised at {path}, line 8)" in report
    assert "last stderr lines" not in result.stderr.split(report)[1].split("\n[trainplane")[0]


def test_omp_num_threads_is_1_with_a_notice_when_unset_and_a_node_runs_several(script):
    path = script("import os\nprint('omp', os.environ.get('OMP_NUM_THREADS'))\n")
    env = {k: v for k, v in project_env().items() if k != "OMP_NUM_THREADS"}
    run = [sys.executable, "-m", "runtime", "launch", "--master-port", "0"]
    two = subprocess.run([*run, "--nproc-per-node", "2", str(path)], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=120)
    one = subprocess.run([*run, "--nnodes", "2", str(path)], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=120)
    mine = subprocess.run([*run, "--nproc-per-node", "2", str(path)], cwd=ROOT, env={**env, "OMP_NUM_THREADS": "3"},
                          capture_output=True, text=True, timeout=120)
    assert sorted(two.stdout.split("\n"))[-2:] == ["[rank 0] omp 1", "[rank 1] omp 1"]
    assert "setting OMP_NUM_THREADS=1 for each of this node's 2 processes" in two.stderr
    assert "omp None" in one.stdout and "OMP_NUM_THREADS" not in one.stderr
    assert mine.stdout.count("omp 3") == 2 and "OMP_NUM_THREADS" not in mine.stderr


CHECKPOINTER = """
import os, signal, sys, time
out = sys.argv[1]
rank = os.environ["RANK"]
def checkpoint(signum, frame):
    with open(os.path.join(out, f"checkpoint-{rank}"), "a") as f:
        f.write("saved\\n")
signal.signal(signal.SIGUSR1, checkpoint)
open(os.path.join(out, f"ready-{rank}"), "w").close()
while not os.path.exists(os.path.join(out, "go")):
    time.sleep(0.05)
print("kept going", rank, flush=True)
"""


def _ready(out: Path, count: int) -> bool:
    return len(list(out.glob("ready-*"))) == count


def test_sigusr1_reaches_every_rank_which_checkpoints_and_keeps_going(tmp_path: Path, script):
    out = tmp_path / "out"
    out.mkdir()
    path = script(CHECKPOINTER)
    proc = subprocess.Popen(
        [sys.executable, "-m", "runtime", "launch", "--nnodes", "2", "--nproc-per-node", "2", "--master-port", "0",
         "--signals-to-handle", "SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR1", str(path), str(out)],
        cwd=ROOT, env=project_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        assert wait_until(lambda: _ready(out, 4), timeout=60)
        proc.send_signal(signal.SIGUSR1)
        assert wait_until(lambda: len(list(out.glob("checkpoint-*"))) == 4, timeout=30)
        (out / "go").touch()
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 0, stderr
    assert sorted(p.read_text() for p in out.glob("checkpoint-*")) == ["saved\n"] * 4
    assert stdout.count("kept going") == 4
    assert "[trainplane] received SIGUSR1, passing it on to every rank" in stderr
    assert "[trainplane node 1] received SIGUSR1: passed on to rank(s) 2, 3" in stderr


def test_sigusr1_not_named_is_reported_and_ignored_not_fatal(tmp_path: Path, script):
    out = tmp_path / "out"
    out.mkdir()
    path = script(CHECKPOINTER)
    proc = subprocess.Popen([sys.executable, "-m", "runtime", "launch", "--master-port", "0", str(path), str(out)],
                            cwd=ROOT, env=project_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert wait_until(lambda: _ready(out, 1), timeout=60)
        lines = Lines(proc)
        for sig in (signal.SIGUSR1, signal.SIGUSR2):
            proc.send_signal(sig)
        assert wait_until(lambda: len(lines.find(r"received SIGUSR[12], which --signals-to-handle does not name")) == 2,
                          timeout=30), lines.text()
        (out / "go").touch()
        proc.wait(timeout=60)  # its stderr is Lines' to read; its stdout is small
        stdout, stderr = proc.stdout.read(), lines.text()  # type: ignore[union-attr]
    finally:
        proc.kill()
    assert proc.returncode == 0, stderr
    assert not list(out.glob("checkpoint-*")) and "kept going 0" in stdout
    for name in ("SIGUSR1", "SIGUSR2"):
        assert f"[trainplane] received {name}, which --signals-to-handle does not name: ignored" in stderr


@pytest.mark.parametrize("sig", [signal.SIGHUP, signal.SIGQUIT])
def test_a_stop_signal_torchrun_handles_reaches_the_ranks_as_itself(tmp_path: Path, script, sig: signal.Signals):
    out = tmp_path / "out"
    out.mkdir()
    path = script(f"""
import os, signal, sys, time
def stop(signum, frame):
    open(os.path.join(sys.argv[1], "got-" + signal.Signals(signum).name + "-" + os.environ["RANK"]), "w").close()
    sys.exit(0)
signal.signal(signal.{sig.name}, stop)
open(os.path.join(sys.argv[1], "ready-" + os.environ["RANK"]), "w").close()
time.sleep(60)
""")
    proc = subprocess.Popen([sys.executable, "-m", "runtime", "launch", "--nproc-per-node", "2", "--master-port", "0",
                             str(path), str(out)], cwd=ROOT, env=project_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert wait_until(lambda: _ready(out, 2), timeout=60)
    proc.send_signal(sig)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 128 + sig
    assert sorted(p.name for p in out.glob("got-*")) == [f"got-{sig.name}-0", f"got-{sig.name}-1"]
    assert f"received {sig.name}: stopping every agent" in stderr


STDIN = """
import os, sys
line = sys.stdin.readline()
print("rank", os.environ["RANK"], "read", repr(line), flush=True)
"""


def test_the_launchers_stdin_reaches_global_rank_0_only(script):
    path = script(STDIN)
    result = subprocess.run([sys.executable, "-m", "runtime", "launch", "--nnodes", "2", "--nproc-per-node", "2",
                             "--master-port", "0", str(path)], cwd=ROOT, env=project_env(), input="hello\n",
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    lines = sorted(line for line in result.stdout.splitlines() if " read " in line)
    assert lines == ["[rank 0] rank 0 read 'hello\\n'"] + [f"[rank {r}] rank {r} read ''" for r in (1, 2, 3)]


def test_breakpoint_on_rank_0_takes_commands_from_the_launchers_stdin(script):
    path = script("import os\nif os.environ['RANK'] == '0':\n    x = 41\n    breakpoint()\n    print('x is', x)\n")
    result = subprocess.run([sys.executable, "-m", "runtime", "launch", "--nproc-per-node", "2", "--master-port", "0",
                             str(path)], cwd=ROOT, env=project_env(), input="x = x + 1\ncontinue\n",
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    # The prompt shows although it ends no line; the commands (not echoed: stdin is no terminal) ran.
    assert "[rank 0] (Pdb) (Pdb) x is 42" in result.stdout


def test_redirects_tee_and_the_local_ranks_filter_as_torchrun(tmp_path: Path, script):
    path = script("import os, sys\nr = os.environ['RANK']\nprint('out', r)\nprint('err', r, file=sys.stderr)\n")
    logs = tmp_path / "logs"
    result = launch("--nproc-per-node", "3", "--master-port", "0", "--log-dir", str(logs), "--redirects", "0:1",
                    "--tee", "1:3", "--local-ranks-filter", "0,1", "--duplicate-stderr-filters", "err 2", str(path))
    assert result.returncode == 0, result.stderr
    shown = {line for line in (result.stdout + result.stderr).splitlines() if line.startswith("[rank")}
    assert shown == {"[rank 0] err 0", "[rank 1] out 1", "[rank 1] err 1"}  # rank 0's stdout went to its file
    (job,) = logs.iterdir()
    gen = job / "node-0" / "gen-1"
    assert (gen / "0" / "stdout.log").read_text() == "out 0\n" and not (gen / "0" / "stderr.log").exists()
    assert (gen / "1" / "stdout.log").read_text() == "out 1\n" and (gen / "1" / "stderr.log").read_text() == "err 1\n"
    assert not (gen / "2" / "stdout.log").exists() and "out 2" in (gen / "rank-2.log").read_text()
    assert (gen / "filtered_stderr.log").read_text() == "[rank 2] err 2\n"


def test_log_dir_is_a_base_with_one_directory_per_run(tmp_path: Path, script):
    path = script("print('hi')\n")
    logs = tmp_path / "logs"
    for _ in range(2):
        assert launch("--master-port", "0", "--log-dir", str(logs), "--rdzv-id", "same", str(path)).returncode == 0
    runs = sorted(p.name for p in logs.iterdir())
    assert len(runs) == 2 and all(r.startswith("same_") for r in runs)
    assert all(json.loads((logs / r / "verdict.json").read_text())["exit_code"] == 0 for r in runs)


def test_role_and_virtual_local_rank_as_torchrun_sets_them(tmp_path: Path, script):
    out = tmp_path / "out"
    out.mkdir()
    path = script(DUMP)
    result = launch("--nproc-per-node", "2", "--master-port", "0", "--role", "trainer", "--virtual-local-rank",
                    str(path), str(out), env={contract.CUDA_VISIBLE_DEVICES: "4,5"})
    assert result.returncode == 0, result.stderr
    envs = [json.loads((out / f"rank-{r}.json").read_text()) for r in (0, 1)]
    assert [(e["ROLE_NAME"], e["LOCAL_RANK"], e["CUDA_VISIBLE_DEVICES"]) for e in envs] == [
        ("trainer", "0", "4"), ("trainer", "0", "5")]


def test_virtual_local_rank_without_a_gpu_per_process_is_refused_naming_both(script):
    result = launch("--virtual-local-rank", "--nproc-per-node", "2", str(script("")), env={"CUDA_VISIBLE_DEVICES": "3"})
    assert result.returncode == 2
    assert ("error: --virtual-local-rank: CUDA_VISIBLE_DEVICES=3 names fewer GPUs than the 2 processes per node"
            in result.stderr)
