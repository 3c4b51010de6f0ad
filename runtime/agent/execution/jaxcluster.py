"""trainplane as a JAX cluster, so that ``jax.distributed.initialize()`` with no arguments works in
every process of a ``jax`` or ``spmd`` job. Standard library only (JAX is the user's).

JAX (0.10.2, ``jax/_src/distributed.py``) reads ``JAX_COORDINATOR_ADDRESS`` and
``JAX_LOCAL_DEVICE_IDS`` from the environment, but the process count and id only from a detected
cluster: a subclass of ``jax._src.clusters.ClusterEnv``, which registers itself when it is defined
(``__init_subclass__``) and is chosen when its ``is_env_present()`` is true, in definition order
(``ClusterEnv.auto_detect_unset_distributed_params``, ``jax/_src/clusters/cluster.py``). No public
entry point exists for this; the docstring of ``ClusterEnv`` is the documented mechanism.

The bootstrap (every user process) calls :func:`install` before the user's code: it watches for the
import of ``jax._src.clusters`` and, right after JAX's own clusters are defined, defines
``TrainplaneCluster``, first in the detection order, so that inside a trainplane job it wins over
JAX's Kubernetes detection (which would query the API server) and nothing pretends to be Slurm or
MPI. It reads the contract's ``JAX_COORDINATOR_ADDRESS``, ``JAX_NUM_PROCESSES``,
``JAX_PROCESS_ID`` and ``JAX_LOCAL_DEVICE_IDS`` when ``initialize()`` runs, so it follows a
membership change. ``jax.distributed.initialize(cluster_detection_method="trainplane")`` names it.
"""

from __future__ import annotations

import os
import sys
import types
from typing import Mapping, Optional

from runtime.agent import contract
from runtime.agent.execution import onimport

CLUSTERS_MODULE = "jax._src.clusters"
"""The module that defines ``ClusterEnv`` and JAX's own cluster types."""
NAME = "trainplane"
"""The cluster's ``name`` (``cluster_detection_method``)."""


def present(env: Optional[Mapping[str, str]] = None) -> bool:
    """Whether this process is a rank of a trainplane job with JAX's variables."""
    environ = os.environ if env is None else env
    return all(environ.get(k) for k in (contract.JAX_COORDINATOR_ADDRESS, contract.JAX_NUM_PROCESSES,
                                    contract.JAX_PROCESS_ID))


def define(clusters: types.ModuleType) -> type:
    """Define ``TrainplaneCluster`` in ``clusters`` (``jax._src.clusters``) and put it first.

    Returns:
        The class.
    """
    base = clusters.ClusterEnv

    class TrainplaneCluster(base):  # type: ignore[misc, valid-type]
        """A rank of a trainplane job: the process count and id from the agent's contract."""

        name = NAME

        @classmethod
        def is_env_present(cls) -> bool:
            return present()

        @classmethod
        def get_coordinator_address(cls, timeout_secs: Optional[int] = None,
                                    override_coordinator_port: Optional[str] = None) -> str:
            address = os.environ[contract.JAX_COORDINATOR_ADDRESS]
            if override_coordinator_port:
                address = f"{address.rpartition(':')[0]}:{override_coordinator_port}"
            return address

        @classmethod
        def get_process_count(cls) -> int:
            return int(os.environ[contract.JAX_NUM_PROCESSES])

        @classmethod
        def get_process_id(cls) -> int:
            return int(os.environ[contract.JAX_PROCESS_ID])

        @classmethod
        def get_local_process_id(cls) -> Optional[int]:
            local = os.environ.get(contract.JAX_LOCAL_DEVICE_IDS, "")
            return int(local) if local.isdigit() else None

    types_ = base._cluster_types
    types_.remove(TrainplaneCluster)
    types_.insert(0, TrainplaneCluster)
    vars(clusters)["TrainplaneCluster"] = TrainplaneCluster
    return TrainplaneCluster


def install() -> None:
    """Make ``TrainplaneCluster`` appear when JAX's clusters are imported (now, if they already are).
    Does nothing outside a job with JAX's variables."""
    if not present():
        return
    loaded = sys.modules.get(CLUSTERS_MODULE)
    if loaded is not None:
        if not hasattr(loaded, "TrainplaneCluster"):
            define(loaded)
        return
    onimport.on_import(CLUSTERS_MODULE, __name__, define)
