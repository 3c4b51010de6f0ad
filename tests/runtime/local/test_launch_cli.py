"""The launcher's command line: one line naming the flag as typed for bad input, torchrun's
spellings and forms, --help."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from runtime.local.launch import build_parser, spec_from_args, validate
from tests.conftest import ROOT, launch, project_env

pytestmark = pytest.mark.process


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["--workers", "0", "x.py"], "--workers"),
        (["--workers", "2", "--quorum-workers", "3", "examples/ddp_digits.py"], "--quorum-workers"),
        (["--workers", "2", "does/not/exist.py"], "SCRIPT"),
        (["--master-port", "70000", "examples/ddp_digits.py"], "--master-port"),
        (["--nnodes", "2", "--master_port", "65500", "x.py"], "--master_port: the job uses 66 ports from it"),
        (["--num-proc", "two", "examples/ddp_digits.py"], "--num-proc"),
        (["--nnodes", "0", "x.py"], "--nnodes: must be 1 or more (got 0)"),
        (["--nproc-per-node", "0", "x.py"], "--nproc-per-node: must be 1 or more (got 0)"),
        (["--nproc_per_node", "0", "x.py"], "--nproc_per_node: must be 1 or more (got 0)"),
        (["--nnodes", "2", "--quorum-workers", "3", "x.py"], "from 1 to --nnodes (2)"),
        (["--workers", "3", "--quorum-workers", "2", "x.py"],
         "--quorum-workers: a fixed-size job forms its world with the first 2 nodes and refuses the other 1"),
        (["--nnodes", "3:4", "--quorum-workers", "2", "x.py"],
         "--quorum-workers: the world would form with fewer nodes than --nnodes MIN (3)"),
        (["--max_restarts", "-1", "x.py"], "--max_restarts: must be 0 or more"),
        (["--mode", "service", "examples/ddp_digits.py"], "SCRIPT"),
        (["--workers", "2"], "SCRIPT"),
        (["--mode", "service", "--tree-fanout", "1"], "--tree-fanout"),
        (["--mode", "service", "--tree-threshold", "0"], "--tree-threshold"),
        (["--mode", "rpc"], "--mode"),
        (["--mode", "service", "--pythonpath", "no/such/dir"], "--pythonpath"),
        (["--no-python", "-m", "pkg.train"], "--no-python"),
        (["--mode", "service", "--no-python"], "--no-python: runs a command, and service mode runs none; unset it"),
        (["--nnodes", "1:x", "x.py"], "--nnodes: must be a whole number, or MIN:MAX (got '1:x'); write it in digits, "
                                      "e.g. 4, or MIN:MAX, e.g. 2:4"),
        (["--nnodes", "3:2", "x.py"], "--nnodes: MIN:MAX needs 1 <= MIN <= MAX (got '3:2'); use a MIN from 1 to MAX"),
        (["--nproc_per_node", "two", "x.py"], "error: --nproc_per_node: must be a whole number, or auto, cpu, gpu or "
                                              "xpu (got 'two'); write it in digits, e.g. 4, or use auto, cpu, gpu"),
        (["--nproc-per-node=two", "x.py"], "error: --nproc-per-node: must be a whole number, or auto"),
        (["--nproc_per_node", "two", "x.py", "--num-proc", "3"], "error: --nproc_per_node: must be a whole number"),
        (["--nproc", "2", "x.py"], "unrecognized arguments: --nproc; --nproc: did you mean --nproc-per-node?"),
        (["--nnode", "2", "x.py"], "--nnode: did you mean --nnodes?"),
        (["--worker=2", "x.py"], "--worker: did you mean --workers?"),
        (["--quorum-timout", "5", "x.py"], "--quorum-timout: did you mean --quorum-timeout?"),
        (["--signals-to-handle", "SIGTERM,SIGNOPE", "x.py"], "--signals-to-handle: 'SIGNOPE' is not a signal"),
        (["--redirects", "4", "x.py"], "--redirects: '4' is not a stream choice (got '4'); use 0 (none), 1 (stdout)"),
        (["-t", "0:x", "x.py"], "-t: 'x' is not a stream choice (got '0:x'); use 0 (none)"),
        (["--local_ranks_filter", "0,a", "x.py"],
         "--local_ranks_filter: must be a comma-separated list of local ranks (got '0,a'); use e.g. 0,1,2"),
        (["--start-method", "thread", "x.py"], "error: --start-method: must be one of spawn, fork, forkserver (got "
                                              "'thread'); use one of spawn, fork, forkserver"),
        (["--node_rank", "one", "x.py"], "error: --node_rank: must be a whole number (got 'one'); write it in digits"),
        (["--max_restarts", "one", "x.py"], "error: --max_restarts: must be a whole number (got 'one'); write it in "
                                            "digits, e.g. 4"),
        (["--quorum-timeout", "soon", "x.py"], "error: --quorum-timeout: must be a number of seconds (got 'soon')"),
        (["--shutdown-timeout", "-1", "x.py"], "--shutdown-timeout: must be 0 or more seconds (got -1.0)"),
        (["--nnodes", "1:2", "--min-workers", "1", "x.py"], "--nnodes: MIN:MAX and --min-workers/--max-workers"),
        (["--nproc-per-node", "2", "--distribution", "ray", "examples/ray_nodes.py"],
         "--nproc-per-node: a ray job runs one driver"),
    ],
)
def test_bad_cli_input_is_one_line_naming_the_flag(args: list[str], flag: str):
    result = launch(*args, timeout=30)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert flag in lines[0] and "error" in lines[0]


def test_nproc_per_node_gpu_where_no_cuda_device_is_visible_names_the_flag_the_problem_and_the_fix():
    """torchrun's ``gpu`` counts the CUDA devices torch sees; with none visible (CUDA_VISIBLE_DEVICES empty, so on
    any machine) the one line names the flag, the problem and the other forms, not torch's bare
    'Cuda is not available.'."""
    result = launch("--nproc-per-node", "gpu", "x.py", timeout=60, env={"CUDA_VISIBLE_DEVICES": ""})
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "python -m runtime launch: error: --nproc-per-node: no CUDA device is visible (got 'gpu'); use a number of "
        "processes, auto or cpu (see --help)"]


def test_help_exits_0_and_an_unknown_command_2():
    helped = subprocess.run([sys.executable, "-m", "runtime", "--help"], cwd=ROOT, env=project_env(),
                            capture_output=True, text=True, timeout=30)
    assert helped.returncode == 0 and "launch" in helped.stdout
    unknown = subprocess.run([sys.executable, "-m", "runtime", "run"], cwd=ROOT, env=project_env(),
                             capture_output=True, text=True, timeout=30)
    assert unknown.returncode == 2 and "usage: python -m runtime launch" in unknown.stderr


def test_nnodes_min_max_starts_max_nodes_and_keeps_going_while_min_remain(tmp_path: Path):
    script = tmp_path / "train.py"
    script.write_text("")
    parser = build_parser()
    ns = parser.parse_args(["--nnodes", "1:3", str(script)])
    validate(parser, ns)
    spec = spec_from_args(ns)
    assert (spec.workers, spec.min_workers, spec.max_workers) == (3, 1, 3)


@pytest.mark.parametrize(("spelling", "dest", "value"), [
    ("--nnodes", "workers", 3), ("--nproc-per-node", "num_proc", 3), ("--nproc_per_node", "num_proc", 3),
    ("--max_restarts", "max_restarts", 2), ("--master_port", "master_port", 0), ("--log_dir", "log_dir", "logs"),
])
def test_torchrun_spellings_are_accepted(spelling: str, dest: str, value: object):
    ns = build_parser().parse_args([spelling, str(value), "train.py", "--lr", "1"])
    assert getattr(ns, dest) == value
    assert (ns.script, ns.args) == ("train.py", ["--lr", "1"])


DELIVERY = """
import signal, sys
from runtime.agent.execution.delivery import DELIVERY_SIGNAL
print("delivery", "ignored" if signal.getsignal(DELIVERY_SIGNAL) == signal.SIG_IGN else "raised", flush=True)
"""


def test_no_monitor_members_does_what_its_help_says(script):
    """--help says the flag turns the exception off; with it a rank ignores the delivery signal,
    without it the rank has the handler that raises WorkerMembershipChanged."""
    shown = subprocess.run([sys.executable, "-m", "runtime", "launch", "--help"], cwd=ROOT, env=project_env(),
                           capture_output=True, text=True, timeout=60).stdout
    help_text = " ".join(shown.split("--no-monitor-members", 2)[2].split("\n  --")[0].split())
    assert help_text.startswith("do not raise WorkerMembershipChanged in user processes on a membership change")
    path = script(DELIVERY)
    off = launch("--no-monitor-members", "--master-port", "0", str(path))
    on = launch("--master-port", "0", str(path))
    assert (off.returncode, on.returncode) == (0, 0), off.stderr + on.stderr
    assert "[rank 0] delivery ignored" in off.stdout and "[rank 0] delivery raised" in on.stdout
