"""What torchrun's agent puts in every worker's environment beyond the world's contract, as pure
decisions (``runtime.agent.world.process_env`` holds the per-world part). Standard library only.

Read from the pinned torch 2.13.0: ``torch/distributed/run.py`` (``config_from_args``: the
``OMP_NUM_THREADS`` rule and its warning; ``--signals-to-handle``'s default),
``torch/distributed/launcher/api.py`` (``TORCHELASTIC_SIGNALS_TO_HANDLE`` put in the environment the
workers inherit), ``torch/distributed/elastic/agent/server/local_elastic_agent.py``
(``_start_workers``, ``_set_local_rank_env``) and ``torch/distributed/elastic/multiprocessing/api.py``
(``DefaultLogsSpecs.reify``: one ``TORCHELASTIC_ERROR_FILE`` per worker).
"""

from __future__ import annotations

from typing import Mapping, Optional

from runtime.agent import contract

OMP_THREADS = "1"
"""What torchrun sets ``OMP_NUM_THREADS`` to."""
AGENT_STORE = "False"
"""``TORCHELASTIC_USE_AGENT_STORE``: torchrun's c10d agent hosts the TCPStore at MASTER_ADDR:MASTER_PORT
("True"); trainplane's agents host none, so ``env://`` lets rank 0 host it, as without torchrun."""


def omp_num_threads(inherited: Mapping[str, str], local_world_size: int) -> Optional[str]:
    """torchrun's rule: ``"1"`` when ``OMP_NUM_THREADS`` is unset and a node runs more than one
    process, so that their OpenMP pools (one thread per core each) do not overload the machine;
    ``None`` (leave it alone) otherwise."""
    if contract.OMP_NUM_THREADS in inherited or local_world_size <= 1:
        return None
    return OMP_THREADS


def omp_notice(local_world_size: int) -> str:
    """The agent's one line when it applies :func:`omp_num_threads` (torchrun prints a banner)."""
    return (f"setting {contract.OMP_NUM_THREADS}={OMP_THREADS} for each of this node's {local_world_size} processes "
            f"(torchrun's default when it is unset), to avoid overloading the machine; set "
            f"{contract.OMP_NUM_THREADS} yourself to tune it")


def worker_env(inherited: Mapping[str, str], local_rank: int, local_world_size: int, signals: str,
               error_file: str, virtual_local_rank: bool = False) -> dict[str, str]:
    """The variables torchrun's agent sets per worker that do not depend on the world.

    Args:
        inherited: the environment the worker inherits from its agent.
        local_rank: the worker's index on its node.
        local_world_size: workers on its node.
        signals: the ``--signals-to-handle`` list (``TORCHELASTIC_SIGNALS_TO_HANDLE``).
        error_file: where the worker's ``@record`` writes its exception (``TORCHELASTIC_ERROR_FILE``).
        virtual_local_rank: torchrun's ``--virtual-local-rank``: ``LOCAL_RANK`` 0 and
            ``CUDA_VISIBLE_DEVICES`` naming the one GPU of this worker.

    Raises:
        ValueError: ``virtual_local_rank`` with fewer ``CUDA_VISIBLE_DEVICES`` entries than workers.
    """
    env = {
        contract.TORCHELASTIC_USE_AGENT_STORE: AGENT_STORE,
        contract.TORCHELASTIC_ERROR_FILE: error_file,
        contract.TORCHELASTIC_SIGNALS_TO_HANDLE: signals,
        contract.TORCH_NCCL_ASYNC_ERROR_HANDLING: inherited.get(contract.TORCH_NCCL_ASYNC_ERROR_HANDLING, "1"),
    }
    threads = omp_num_threads(inherited, local_world_size)
    if threads is not None:
        env[contract.OMP_NUM_THREADS] = threads
    if virtual_local_rank:
        visible = inherited.get(contract.CUDA_VISIBLE_DEVICES)
        devices = [d.strip() for d in visible.split(",")] if visible is not None else None
        if devices is not None and local_rank >= len(devices):
            raise ValueError(f"local rank {local_rank} has no GPU of its own in "
                             f"{contract.CUDA_VISIBLE_DEVICES}={visible} (--virtual-local-rank)")
        env[contract.LOCAL_RANK] = "0"
        env[contract.CUDA_VISIBLE_DEVICES] = devices[local_rank] if devices is not None else str(local_rank)
    return env
