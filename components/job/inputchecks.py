"""The checks of the ``DistributedJobArgs`` fields that take a ``pulumi.Input``: one per field, run at once on a
plain value and, when Pulumi knows it, on an Output (``components.outputs``), with the same message."""

from __future__ import annotations

from types import MappingProxyType
from typing import Any, Callable, Mapping, Optional

from components.errors import InvalidJobArgs
from components.job import checks
from runtime.agent import contract

TOLERATION_KEYS = frozenset({"key", "operator", "value", "effect", "tolerationSeconds"})
PEER_KEYS = frozenset({"podSelector", "namespaceSelector", "ipBlock"})
PROCESS_ENV = (
    contract.WORLD_SIZE, contract.RANK, contract.LOCAL_RANK, contract.LOCAL_WORLD_SIZE,
    contract.NODE_RANK, contract.GROUP_RANK, contract.NODE_WORLD_SIZE, contract.GROUP_WORLD_SIZE,
    contract.POD_IPS, contract.MASTER_ADDR, contract.MASTER_PORT, contract.TORCHELASTIC_RUN_ID,
    contract.TORCHELASTIC_RESTART_COUNT, contract.TORCHELASTIC_MAX_RESTARTS,
    contract.JAX_COORDINATOR_ADDRESS, contract.JAX_NUM_PROCESSES, contract.JAX_PROCESS_ID,
    contract.JAX_LOCAL_DEVICE_IDS, contract.TF_CONFIG, contract.RAY_ADDRESS, contract.MONARCH_WORKER_ADDRESSES,
    contract.POD_IP, contract.POD_NAME, contract.POD_NAMESPACE, contract.JOB_COMPLETION_INDEX,
    "PYTHONPATH",
)
"""Variables the component or the agent sets; user ``env`` may not override them."""
RESERVED_ENV_PREFIX = "TRAINPLANE_"
OWNED_LABELS = (
    contract.LABEL_NAME, contract.LABEL_INSTANCE, contract.LABEL_COMPONENT, contract.LABEL_PART_OF,
    contract.LABEL_MANAGED_BY, contract.LABEL_JOB,
)


def env_check(setting_fields: Mapping[str, str]) -> Callable[[Any], Mapping[str, str]]:
    """The check of ``env``: names and string values, none that trainplane sets; the fix of one that sets an agent
    setting names the field for it (``setting_fields``: field by environment variable)."""

    def check(value: Any) -> Mapping[str, str]:
        if not isinstance(value, Mapping):
            raise InvalidJobArgs("env", value, "must be a mapping of names to values", "pass a dict")
        for key, item in value.items():
            checks.require_env_name(f"env[{key!r}]", key)
            if key in PROCESS_ENV or key.startswith(RESERVED_ENV_PREFIX):
                if key == "PYTHONPATH":
                    fix = "list the directories to import from in pythonpath"
                elif key in setting_fields:
                    fix = f"set the DistributedJobArgs field {setting_fields[key]} instead"
                else:
                    fix = "use the matching DistributedJobArgs field instead"
                raise InvalidJobArgs(f"env[{key!r}]", item, "is set by trainplane", f"remove it; {fix}")
            if not isinstance(item, str):
                raise InvalidJobArgs(f"env[{key!r}]", item, "environment values are strings", "quote it")
        return frozen(value)

    return check


def _check_image(value: Any) -> str:
    if not isinstance(value, str) or not value or any(c.isspace() for c in value):
        raise InvalidJobArgs("image", value, "must be a non-empty image reference without spaces",
                             'pass e.g. "python:3.11-slim"')
    return value


def _check_args(value: Any) -> tuple[str, ...]:
    kept = frozen(value)
    checks.require_strings("args", kept, "must be a list of strings", 'quote numbers: ["--epochs", "3"]')
    return kept


def _check_namespace(value: Any) -> str:
    checks.require_dns1123_label("namespace", value)
    return value


def _check_labels(value: Any) -> Mapping[str, str]:
    checks.require_labels("labels", value)
    for key in value:
        if key in OWNED_LABELS:
            raise InvalidJobArgs(f"labels[{key!r}]", value[key], "is set by trainplane", "remove it")
    return frozen(value)


def _check_node_selector(value: Any) -> Mapping[str, str]:
    checks.require_labels("node_selector", value)
    return frozen(value)


def _check_tolerations(value: Any) -> tuple[Mapping[str, Any], ...]:
    kept = frozen(value)
    checks.require_list("tolerations", kept)
    for i, toleration in enumerate(kept):
        if not isinstance(toleration, Mapping) or not set(toleration) <= TOLERATION_KEYS:
            raise InvalidJobArgs(f"tolerations[{i}]", toleration, "not a Kubernetes Toleration",
                                 f"use a dict with keys from {sorted(TOLERATION_KEYS)}")
    return kept


def _check_pythonpath(value: Any) -> tuple[str, ...]:
    kept = frozen(value)
    if not isinstance(kept, tuple):
        raise InvalidJobArgs("pythonpath", value, "must be a list of directories",
                             'pass a list such as ["/app/examples"]')
    for i, directory in enumerate(kept):
        checks.require_absolute_path(f"pythonpath[{i}]", directory)
        if ":" in directory:
            raise InvalidJobArgs(f"pythonpath[{i}]", directory, "contains ':', the PYTHONPATH separator",
                                 "give each directory as its own list item")
    return kept


def _check_allow_from(value: Any) -> tuple[Mapping[str, Any], ...]:
    kept = frozen(value)
    checks.require_list("allow_from", kept)
    for i, peer in enumerate(kept):
        if not isinstance(peer, Mapping) or not peer or not set(peer) <= PEER_KEYS:
            raise InvalidJobArgs(f"allow_from[{i}]", peer, "not a NetworkPolicyPeer",
                                 f"use a dict with keys from {sorted(PEER_KEYS)}")
    return kept


def _optional_subdomain(name: str) -> Callable[[Any], Optional[str]]:
    """The check of an optional object name (queue, ClusterQueue, scheduler, service account)."""

    def check(value: Any) -> Optional[str]:
        if value is not None:
            checks.require_dns1123_subdomain(name, value)
        return value

    return check


CHECKS: dict[str, Callable[[Any], Any]] = {
    "image": _check_image,
    "args": _check_args,
    "namespace": _check_namespace,
    "labels": _check_labels,
    "node_selector": _check_node_selector,
    "tolerations": _check_tolerations,
    "pythonpath": _check_pythonpath,
    "allow_from": _check_allow_from,
    **{name: _optional_subdomain(name) for name in ("queue", "cluster_queue", "scheduler_name", "service_account")},
}
"""The check of each field that takes a ``pulumi.Input`` but ``env`` (:func:`env_check`): it raises
:class:`InvalidJobArgs` for an invalid value and returns a valid one as the args keep it (collections frozen)."""



def frozen(value: Any) -> Any:
    """Lists and tuples as tuples, mappings as read-only copies, anything else as is."""
    if isinstance(value, Mapping):
        return MappingProxyType(dict(value))
    if isinstance(value, (list, tuple)):
        return tuple(value)
    return value
