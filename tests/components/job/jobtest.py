"""Shared test helpers for components.job: schema validation and a recording Pulumi mock."""

from __future__ import annotations

import copy
import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

import jsonschema
import kubernetes_validate
import pulumi
import yaml
from pulumi.runtime.mocks import MockMonitor
from pulumi.runtime.rpc import _special_secret_sig, _special_sig_key

from components.job.args import DistributedJobArgs

REPO_ROOT = Path(__file__).resolve().parents[3]
SCHEMAS = REPO_ROOT / ".." / "shared" / "schemas"
KUBERNETES_VERSION = "1.33"
"""Kubernetes version the built-in objects are validated against (kubernetes-validate, strict)."""
CRD_FILES = {
    ("kubeflow.org", "PyTorchJob"): "kubeflow.org_pytorchjobs.yaml",
    ("scheduling.volcano.sh", "PodGroup"): "scheduling.volcano.sh_podgroups.yaml",
    ("scheduling.x-k8s.io", "PodGroup"): "scheduling.x-k8s.io_podgroups.yaml",
    ("kueue.x-k8s.io", "LocalQueue"): "kueue.x-k8s.io_localqueues.yaml",
}
TOKEN = "test-token-value"
PASSWORD = "mock-password-result"
STACK_TYPE = "pulumi:pulumi:Stack"


def job_args(**overrides: Any) -> DistributedJobArgs:
    """A small valid job, with ``overrides`` applied."""
    base: dict[str, Any] = {"image": "python:3.11-slim", "script": "train.py", "workers": 2, "num_proc": 2}
    base.update(overrides)
    return DistributedJobArgs(**base)


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


def _strict(node: Any) -> Any:
    """Forbid unknown fields wherever a CRD schema lists properties (the API server would prune them)."""
    if isinstance(node, dict):
        out = {k: _strict(v) for k, v in node.items()}
        if "properties" in out and "additionalProperties" not in out:
            out["additionalProperties"] = False
        return out
    if isinstance(node, list):
        return [_strict(v) for v in node]
    return node


@functools.cache
def crd_validator(api_version: str, kind: str) -> jsonschema.Draft7Validator:
    """A strict validator for ``kind`` at ``api_version``, from the published CRD's openAPIV3Schema."""
    group, version = api_version.split("/")
    crd = yaml.safe_load((SCHEMAS / CRD_FILES[(group, kind)]).read_text())
    entry = next(v for v in crd["spec"]["versions"] if v["name"] == version)
    return jsonschema.Draft7Validator(_strict(copy.deepcopy(entry["schema"]["openAPIV3Schema"])))


def validate_manifest(obj: dict[str, Any]) -> None:
    """Validate one object: built-ins with kubernetes-validate (strict), custom resources against their CRD.

    Raises:
        jsonschema.ValidationError: the object does not match its schema.
    """
    group = obj["apiVersion"].split("/")[0]
    if (group, obj["kind"]) in CRD_FILES:
        crd_validator(obj["apiVersion"], obj["kind"]).validate(obj)
    else:
        kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)


@dataclass
class Registration:
    """One resource as the engine saw it."""

    type: str
    name: str
    urn: str = ""
    parent: str = ""
    dependencies: list[str] = field(default_factory=list)
    provider: str = ""
    delete_before_replace: bool = False
    replace_on_changes: list[str] = field(default_factory=list)
    inputs: dict[str, Any] = field(default_factory=dict)


class Mocks(pulumi.runtime.Mocks):
    """Returns a non-empty id, fills ``metadata`` for Kubernetes types and a password ``result``."""

    def __init__(self) -> None:
        self.inputs: dict[str, dict[str, Any]] = {}

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str, dict]:
        self.inputs[args.name] = args.inputs
        outputs = dict(args.inputs)
        if args.typ.startswith("kubernetes:") and not args.typ.startswith("pulumi:providers"):
            meta = dict(outputs.get("metadata") or {})
            meta.setdefault("name", args.name)
            meta.setdefault("namespace", "default")
            outputs["metadata"] = meta
        if args.typ == "random:index/randomPassword:RandomPassword":
            outputs["result"] = PASSWORD
        return f"{args.name}-id", outputs

    def call(self, args: pulumi.runtime.MockCallArgs) -> tuple[dict, None]:
        return {}, None


class RecordingMonitor(MockMonitor):
    """The mock monitor, also recording each registration's parent, dependencies and options."""

    def __init__(self, mocks: Mocks) -> None:
        super().__init__(mocks)
        self.registrations: dict[str, Registration] = {}
        self.recorded_inputs = mocks.inputs

    def RegisterResource(self, request: Any) -> Any:
        response = super().RegisterResource(request)
        if request.type != STACK_TYPE:
            self.registrations[request.name] = Registration(
                type=request.type,
                name=request.name,
                urn=response.urn,
                parent=request.parent,
                dependencies=list(request.dependencies),
                provider=request.provider,
                delete_before_replace=request.deleteBeforeReplace,
                replace_on_changes=list(request.replaceOnChanges),
                inputs=self.recorded_inputs.get(request.name, {}),
            )
        return response


@dataclass
class Deployment:
    """What a mocked program registered, and the values its outputs resolved to."""

    registrations: dict[str, Registration]
    outputs: dict[str, Any]
    secret_outputs: set[str]

    def children_of(self, urn: str) -> dict[str, Registration]:
        """Registrations whose parent is ``urn``, by name."""
        return {n: r for n, r in self.registrations.items() if r.parent == urn}

    def component(self) -> Registration:
        """The one DistributedJob registration."""
        return next(r for r in self.registrations.values() if r.type == "trainplane:job:DistributedJob")


def deploy(
    program: Callable[[], dict[str, pulumi.Output[Any]]], monitor: Optional[RecordingMonitor] = None
) -> Deployment:
    """Run ``program`` under fresh mocks and wait until every resource has registered.

    Args:
        program: builds resources and returns named Outputs to resolve.
        monitor: the monitor to record into (to inspect it when ``program`` raises); a fresh one by default.

    Returns:
        The registrations and the resolved outputs (with which of them are secret).
    """
    monitor = monitor or RecordingMonitor(Mocks())
    pulumi.runtime.set_mocks(monitor.mocks, preview=False, monitor=monitor)
    resolved: dict[str, Any] = {}
    secret: set[str] = set()

    @pulumi.runtime.test
    def run() -> pulumi.Output[Any]:
        outputs = program()

        async def is_secret(name: str, out: pulumi.Output[Any]) -> None:
            if await out.is_secret():
                secret.add(name)

        def collect(values: list[Any]) -> None:
            resolved.update(zip(outputs, values))

        checks = [pulumi.Output.from_input(is_secret(n, o)) for n, o in outputs.items()]
        return pulumi.Output.all(*outputs.values(), *checks).apply(lambda v: collect(v[: len(outputs)]))

    run()
    return Deployment(registrations=monitor.registrations, outputs=resolved, secret_outputs=secret)
