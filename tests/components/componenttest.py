"""Test helpers for every component test: stack config loading, job arguments, and a recording Pulumi
mock (it also runs ``__main__.py``)."""

from __future__ import annotations

import copy
import functools
import gc
import json
import runpy
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

import pulumi
import yaml
from pulumi.runtime.mocks import MockMonitor
from pulumi.runtime.proto import resource_pb2
from pulumi.runtime.rpc import _special_secret_sig, _special_sig_key
from pulumi.runtime.settings import SETTINGS

from components.job.args import DistributedJobArgs

REPO_ROOT = Path(__file__).resolve().parents[2]


STACKS = sorted(p.name[len("Pulumi.") : -len(".yaml")] for p in (REPO_ROOT / "stacks").glob("Pulumi.*.yaml"))
PROJECT = "trainplane"
STACK = "test"
"""The stack every mocked program runs in."""
STACK_TYPE = "pulumi:pulumi:Stack"
KUBECONFIG = """apiVersion: v1
kind: Config
clusters:
- name: test
  cluster: {server: "https://127.0.0.1:6443"}
contexts:
- name: test
  context: {cluster: test, user: test}
current-context: test
users:
- name: test
  user: {token: test-token}
"""
TOKEN = "test-token-value"
"""A job token for the pure builders."""
PASSWORD = "mock-password-result"
"""What the mocks return as a ``RandomPassword``'s ``result`` (the job token under Pulumi)."""


# --- stack config -------------------------------------------------------------------------------


@functools.cache
def _yaml_file(path: Path) -> Any:
    """``path`` parsed, once a session (every mocked program reads Pulumi.yaml's defaults: 100 parses, 1.7 s)."""
    return yaml.safe_load(path.read_text())


def project_config() -> dict[str, dict[str, Any]]:
    """The ``config`` block of Pulumi.yaml (a copy of its own)."""
    return copy.deepcopy(_yaml_file(REPO_ROOT / "Pulumi.yaml")["config"])


def stack_file(stack: str) -> dict[str, Any]:
    """The ``config`` block of ``stacks/Pulumi.<stack>.yaml``, keys as written (namespaced; a copy of its own)."""
    return copy.deepcopy(_yaml_file(REPO_ROOT / "stacks" / f"Pulumi.{stack}.yaml")["config"])


def stack_config(stack: str, **overrides: Any) -> dict[str, str]:
    """The config the Pulumi CLI hands the program for ``stack``.

    Project defaults from Pulumi.yaml, then the stack file's values, then ``overrides`` (project
    keys without namespace); non-strings JSON-encoded, as the CLI does.
    """
    defaults = {k: d["default"] for k, d in project_config().items() if "default" in d}
    values: dict[str, Any] = {f"{PROJECT}:{k}": v for k, v in defaults.items()}
    values.update(stack_file(stack))
    values.update({f"{PROJECT}:{k}": v for k, v in overrides.items()})
    return {k: v if isinstance(v, str) else json.dumps(v) for k, v in values.items() if v is not None}


def kube_home(path: Path) -> Path:
    """Make ``path`` a HOME whose ``~/.kube/config`` is ``KUBECONFIG`` (the existing stack reads kubectl's
    default kubeconfig); returns ``path``."""
    (path / ".kube").mkdir()
    (path / ".kube" / "config").write_text(KUBECONFIG)
    return path


def getter(config: dict[str, str]) -> Callable[[str], Optional[str]]:
    """``pulumi.Config().get`` over ``config``."""
    return lambda key: config.get(f"{PROJECT}:{key}")


# --- jobs ---------------------------------------------------------------------------------------


def job_args(**overrides: Any) -> DistributedJobArgs:
    """A small valid job, with ``overrides`` applied; a batch job runs ``train.py`` unless told otherwise
    (a service job runs no script)."""
    base: dict[str, Any] = {"image": "python:3.11-slim", "workers": 2, "num_proc": 2}
    if overrides.get("mode", "batch") != "service":
        base["script"] = "train.py"
    base.update(overrides)
    return DistributedJobArgs(**base)


def tolerates(toleration: Mapping[str, Any], taint: Any) -> bool:
    """Whether a pod toleration (a dict) with ``operator: Exists`` tolerates an EKS node group taint
    (``NodeGroupTaintArgs``)."""
    effects = {"NO_SCHEDULE": "NoSchedule", "NO_EXECUTE": "NoExecute", "PREFER_NO_SCHEDULE": "PreferNoSchedule"}
    return (
        toleration["key"] == taint.key
        and toleration["operator"] == "Exists"
        and toleration.get("effect") in (None, effects[taint.effect])
    )


# --- recording mocks ----------------------------------------------------------------------------


def is_secret(value: Any) -> bool:
    """Whether a mock input is a Pulumi secret (serialised with the secret signature)."""
    return isinstance(value, dict) and value.get(_special_sig_key) == _special_secret_sig


def unsecret(value: Any) -> Any:
    """A mock input with every secret wrapper replaced by the value inside it."""
    if is_secret(value):
        return unsecret(value["value"])
    if isinstance(value, dict):
        return {k: unsecret(v) for k, v in value.items()}
    if isinstance(value, list):
        return [unsecret(v) for v in value]
    return value


class DuplicateUrn(AssertionError):
    """Two resources registered one URN: the Pulumi engine refuses the second ("Duplicate resource URN")."""


@dataclass
class Registration:
    """One resource as the engine saw it."""

    type: str
    name: str
    urn: str
    parent: str
    dependencies: list[str]
    provider: str
    custom: bool
    remote: bool
    delete_before_replace: bool
    replace_on_changes: list[str]
    inputs: dict[str, Any]
    retain_on_delete: bool = False
    """``retainOnDelete``: Pulumi leaves the object in the cluster when it deletes the resource."""
    transforms: list[Any] = field(default_factory=list)
    alias_types: list[str] = field(default_factory=list)
    """The types of the aliases it was registered with (a former type token)."""
    aliases: list[Any] = field(default_factory=list)
    """The aliases as the engine receives them (``alias_pb2.Alias``: a spec or a URN), for ``plan.py``."""


LOCAL_RUN = "command:local:run"
"""pulumi-command's ``local.run`` invoke: a command run at every preview and update."""
GET_NODE_GROUP = "aws:eks/getNodeGroup:getNodeGroup"
"""pulumi-aws's EKS node group lookup; the mocks answer with the group's Auto Scaling group (:func:`node_group_asg`)."""


def node_group_asg(node_group: str) -> str:
    """The Auto Scaling group name the mocks give an EKS node group."""
    return f"eks-{node_group}-asg"


class Mocks(pulumi.runtime.Mocks):
    """Non-empty ids, ``metadata`` on Kubernetes objects, the outputs the programs read, and the stdout
    of ``local.run`` commands (``command_stdout``, by command; a stand-in image ID otherwise).

    ``outputs`` adds outputs by resource name, e.g. ``{"trainer-image": {"digest": UNKNOWN}}`` for a value
    Pulumi does not know at preview (``pulumi.runtime.rpc.UNKNOWN``)."""

    def __init__(
        self,
        command_stdout: Optional[Mapping[str, str]] = None,
        outputs: Optional[Mapping[str, Mapping[str, Any]]] = None,
    ) -> None:
        self.seen: dict[tuple[str, str], pulumi.runtime.MockResourceArgs] = {}
        self.command_stdout = dict(command_stdout or {})
        self.extra_outputs = {name: dict(values) for name, values in (outputs or {}).items()}
        self.commands_run: list[str] = []

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str, dict]:
        self.seen[args.typ, args.name] = args
        outputs = dict(args.inputs)
        if args.typ.startswith("kubernetes:") and args.typ != "pulumi:providers:kubernetes":
            metadata = {"name": args.name, "namespace": "default", **(outputs.get("metadata") or {})}
            outputs["metadata"] = metadata
        if args.typ == "eks:index:Cluster":
            outputs["kubeconfigJson"] = json.dumps(yaml.safe_load(KUBECONFIG))
        if args.typ == "command:local:Command":
            outputs["stdout"] = KUBECONFIG
        if args.typ == "aws:iam/role:Role":
            outputs.update(arn=f"arn:aws:iam::123456789012:role/{args.name}", name=args.name)
        if args.typ == "random:index/randomPassword:RandomPassword":
            outputs["result"] = PASSWORD
        outputs.update(self.extra_outputs.get(args.name, {}))
        return f"{args.name}-id", outputs

    def call(self, args: pulumi.runtime.MockCallArgs) -> dict[str, Any]:
        if args.token == GET_NODE_GROUP:
            return {"resources": [{"autoscalingGroups": [{"name": node_group_asg(args.args["nodeGroupName"])}]}]}
        if args.token != LOCAL_RUN:
            return {}
        command = args.args["command"]
        self.commands_run.append(command)
        stdout = self.command_stdout.get(command, f"sha256:{sum(command.encode()):064x}")
        return {"command": command, "stdout": stdout, "stderr": ""}


class RecordingMonitor(MockMonitor):
    """The mock monitor, also recording each registration's parent, dependencies, provider and options.

    It declines resource references, so a resource passed as an input (``eks.ManagedNodeGroup``'s
    ``cluster``) arrives as its URN instead of being rehydrated on the monitor's own event loop.
    """

    def __init__(self, mocks: Optional[Mocks] = None) -> None:
        super().__init__(mocks or Mocks())
        self.registrations: dict[str, Registration] = {}

    def GetDeploymentInfo(self, request: Any) -> Any:
        info = super().GetDeploymentInfo(request)
        features = [
            f
            for f in info.supportedFeatures
            if f != resource_pb2.RESOURCE_MONITOR_FEATURE_RESOURCE_REFERENCES
        ]
        return resource_pb2.DeploymentInfo(supportedFeatures=features)

    def SupportsFeature(self, request: Any) -> Any:
        if request.id == "resourceReferences":
            return type("SupportsFeatureResponse", (), {"hasSupport": False})
        return super().SupportsFeature(request)

    def RegisterResource(self, request: Any) -> Any:
        response = super().RegisterResource(request)
        if response.urn in self.registrations:
            raise DuplicateUrn(response.urn)
        if request.type != STACK_TYPE:
            seen = self.mocks.seen[request.type, request.name]
            self.registrations[response.urn] = Registration(
                type=request.type,
                name=request.name,
                urn=response.urn,
                parent=request.parent,
                dependencies=list(request.dependencies),
                provider=request.provider,
                custom=request.custom,
                remote=request.remote,
                delete_before_replace=request.deleteBeforeReplace,
                replace_on_changes=list(request.replaceOnChanges),
                inputs=seen.inputs,
                retain_on_delete=request.retainOnDelete,
                transforms=list(seen.transforms),
                alias_types=[alias.spec.type for alias in request.aliases if alias.spec.type],
                aliases=list(request.aliases),
            )
        return response


@dataclass
class Deployment:
    """What a mocked program registered and the values its stack outputs resolved to."""

    registrations: dict[str, Registration]
    outputs: dict[str, Any]
    secret_outputs: set[str]

    def of_type(self, type_: str) -> list[Registration]:
        """Registrations of ``type_``."""
        return [r for r in self.registrations.values() if r.type == type_]

    def one(self, type_: str) -> Registration:
        """The only registration of ``type_``."""
        (found,) = self.of_type(type_)
        return found

    def named(self, name: str) -> Registration:
        """The only registration called ``name``."""
        (found,) = [r for r in self.registrations.values() if r.name == name]
        return found

    def children(self, reg: Registration) -> dict[str, Registration]:
        """The registrations whose parent is ``reg``, by name."""
        return {r.name: r for r in self.registrations.values() if r.parent == reg.urn}

    def descendants(self, reg: Registration) -> list[Registration]:
        """Every registration below ``reg``."""
        below = list(self.children(reg).values())
        return below + [d for r in below for d in self.descendants(r)]

    def parent_of(self, reg: Registration) -> Optional[Registration]:
        """``reg``'s parent, or None when it is the stack."""
        return self.registrations.get(reg.parent)


def deploy(
    program: Callable[[], Mapping[str, Any]],
    config: Optional[dict[str, str]] = None,
    monitor: Optional[RecordingMonitor] = None,
    preview: bool = False,
) -> Deployment:
    """Run ``program`` under fresh mocks with ``config`` and wait for every registration.

    Args:
        program: Creates resources; returns named values (Outputs or plain) to resolve.
        config: Config values by full key.
        monitor: The monitor to record into, to inspect it when ``program`` raises; a fresh one by
            default.
        preview: Run as ``pulumi preview`` does (outputs the mocks give as ``UNKNOWN`` stay unknown).

    Returns:
        The registrations and the resolved values (and which are secret).
    """
    monitor = monitor or RecordingMonitor()
    pulumi.runtime.set_mocks(monitor.mocks, project=PROJECT, stack=STACK, preview=preview, monitor=monitor)
    pulumi.runtime.set_all_config(config or {})
    resolved: dict[str, Any] = {}
    secret: set[str] = set()

    @pulumi.runtime.test
    def run() -> pulumi.Output[Any]:
        outputs = {k: pulumi.Output.from_input(v) for k, v in program().items()}

        async def mark(name: str, out: pulumi.Output[Any]) -> None:
            if await out.is_secret():
                secret.add(name)

        marks = [pulumi.Output.from_input(mark(n, o)) for n, o in outputs.items()]
        return pulumi.Output.all(*outputs.values(), *marks).apply(
            lambda values: resolved.update(zip(outputs, values[: len(outputs)]))
        )

    try:
        run()
    except BaseException:
        _drop_failed_registrations()
        raise
    return Deployment(monitor.registrations, resolved, secret)


def _drop_failed_registrations() -> None:
    """Finalize, here, the futures a failed run leaves behind.

    Each child whose registration failed leaves a future whose exception nobody retrieved; when it is
    collected, asyncio logs it with its traceback, and Python 3.11's traceback formatting parses source
    (``ast.parse``, for the caret anchors). Collected later, inside another ``ast.parse`` (``inspect.getsource``),
    that nested parse breaks the outer one's recursion-depth check in CPython 3.11
    (``SystemError: AST constructor recursion depth mismatch``; the same check as python/cpython#106905).
    """
    SETTINGS.rpc_manager.clear()
    SETTINGS.outputs.clear()
    gc.collect()


def run_program(config: dict[str, str]) -> Deployment:
    """Run ``__main__.py`` under mocks with ``config``; the resolved values are its stack outputs."""

    def program() -> Mapping[str, Any]:
        root = pulumi.runtime.get_root_resource()
        root.outputs.clear()
        runpy.run_path(str(REPO_ROOT / "__main__.py"), run_name="__main__")
        return dict(root.outputs)

    return deploy(program, config)
