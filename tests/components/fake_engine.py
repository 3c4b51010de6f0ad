"""A stand-in for the two gRPC services of the Pulumi engine that a provider plugin calls back: the engine
(logging) and the resource monitor (registrations). The real plugin process (``provider/``) runs against
it, so ``GetSchema`` and ``Construct`` go through the Python SDK's provider server as the CLI drives them.

What the engine does and this stand-in copies (pulumi/pulumi ``pkg/resource/deploy/source_eval.go``,
``sdk/go/common/resource/plugin/rpc.go``; ``proto/pulumi/resource.proto``, ``provider.proto``):
- it starts the plugin as ``<plugin> <engine address>`` and reads the port the plugin prints;
- a ``ConstructRequest`` carries the inputs as a ``Struct`` (every number a float), an unknown value as
  the sentinel ``04da6b54-80e4-46f7-96ec-b56ff0331ba9`` during preview, a secret wrapped in the secret
  signature, and per input the URNs it depends on;
- each ``RegisterResource`` gets a URN ``urn:pulumi:<stack>::<project>::<parent types$>type::<name>``,
  a custom resource an ID, and its outputs back (here: its inputs).
What it does not do: diffs, state, provider plugins for the children (their registrations are recorded,
not sent anywhere).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import grpc
from google.protobuf import empty_pb2, json_format, struct_pb2
from pulumi.runtime.proto import (
    engine_pb2,
    engine_pb2_grpc,
    provider_pb2,
    provider_pb2_grpc,
    resource_pb2,
    resource_pb2_grpc,
)

PROJECT = "platform"
STACK = "dev"
STACK_URN = f"urn:pulumi:{STACK}::{PROJECT}::pulumi:pulumi:Stack::{PROJECT}-{STACK}"
PASSWORD = "engine-password-result"
"""What the stand-in returns as a ``RandomPassword``'s ``result``."""
FEATURES = (
    resource_pb2.RESOURCE_MONITOR_FEATURE_SECRETS,
    resource_pb2.RESOURCE_MONITOR_FEATURE_RESOURCE_REFERENCES,
    resource_pb2.RESOURCE_MONITOR_FEATURE_ALIAS_SPECS,
    resource_pb2.RESOURCE_MONITOR_FEATURE_DELETED_WITH,
)
"""What the stand-in monitor says it supports (no output values: inputs arrive as plain values)."""


@dataclass
class Registered:
    """One ``RegisterResource`` call as the monitor saw it."""

    type: str
    name: str
    urn: str
    parent: str
    custom: bool
    inputs: dict[str, Any]
    dependencies: list[str]
    alias_types: list[str] = field(default_factory=list)


class Monitor(resource_pb2_grpc.ResourceMonitorServicer):
    """Records every registration and answers it with its inputs as outputs."""

    def __init__(self) -> None:
        self.registered: list[Registered] = []
        self.logs: list[str] = []

    def GetDeploymentInfo(self, request: Any, context: Any) -> resource_pb2.DeploymentInfo:
        return resource_pb2.DeploymentInfo(supportedFeatures=list(FEATURES))

    def SupportsFeature(self, request: Any, context: Any) -> resource_pb2.SupportsFeatureResponse:
        names = {"secrets", "resourceReferences", "aliasSpecs", "deletedWith"}
        return resource_pb2.SupportsFeatureResponse(hasSupport=request.id in names)

    def RegisterResource(self, request: Any, context: Any) -> resource_pb2.RegisterResourceResponse:
        qualified = request.type
        if request.parent:
            qualified = f"{request.parent.split('::')[2].split('$')[-1]}${request.type}"
        urn = f"urn:pulumi:{STACK}::{PROJECT}::{qualified}::{request.name}"
        inputs = json_format.MessageToDict(request.object)
        self.registered.append(Registered(
            type=request.type, name=request.name, urn=urn, parent=request.parent, custom=request.custom,
            inputs=inputs, dependencies=list(request.dependencies),
            alias_types=[a.spec.type for a in request.aliases if a.spec.type],
        ))
        outputs = dict(inputs)
        if request.type == "random:index/randomPassword:RandomPassword":
            outputs["result"] = PASSWORD
        state = struct_pb2.Struct()
        state.update(outputs)
        return resource_pb2.RegisterResourceResponse(urn=urn, id=f"{request.name}-id" if request.custom else "",
                                                     object=state)

    def RegisterResourceOutputs(self, request: Any, context: Any) -> empty_pb2.Empty:
        return empty_pb2.Empty()

    def RegisterPackage(self, request: Any, context: Any) -> resource_pb2.RegisterPackageResponse:
        return resource_pb2.RegisterPackageResponse(ref=f"{request.name}-package")

    def SignalAndWaitForShutdown(self, request: Any, context: Any) -> empty_pb2.Empty:
        return empty_pb2.Empty()


class Engine(engine_pb2_grpc.EngineServicer):
    """Keeps the plugin's log lines."""

    def __init__(self, monitor: Monitor) -> None:
        self.monitor = monitor

    def Log(self, request: Any, context: Any) -> empty_pb2.Empty:
        self.monitor.logs.append(request.message)
        return empty_pb2.Empty()

    def GetRootResource(self, request: Any, context: Any) -> engine_pb2.GetRootResourceResponse:
        return engine_pb2.GetRootResourceResponse(urn=STACK_URN)

    def SetRootResource(self, request: Any, context: Any) -> engine_pb2.SetRootResourceResponse:
        return engine_pb2.SetRootResourceResponse()


class FakeEngine:
    """The engine and monitor services on loopback, and the plugin process they drive.

    Use as a context manager: entering starts the services and the plugin, leaving stops both.
    """

    def __init__(self, plugin_dir: Path) -> None:
        self.plugin_dir = plugin_dir
        self.monitor = Monitor()
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
        engine_pb2_grpc.add_EngineServicer_to_server(Engine(self.monitor), self.server)
        resource_pb2_grpc.add_ResourceMonitorServicer_to_server(self.monitor, self.server)
        self.address = f"127.0.0.1:{self.server.add_insecure_port('127.0.0.1:0')}"
        self.plugin: Optional[subprocess.Popen[bytes]] = None
        self.stderr = tempfile.TemporaryFile()  # noqa: SIM115 - the plugin writes to it for its life; closed on exit
        self.provider: Optional[provider_pb2_grpc.ResourceProviderStub] = None
        self.channel: Optional[grpc.Channel] = None

    def __enter__(self) -> FakeEngine:
        self.server.start()
        # As the Python language host runs a plugin: `python <plugin directory> <engine address>`.
        self.plugin = subprocess.Popen(
            [sys.executable, str(self.plugin_dir), self.address],
            stdout=subprocess.PIPE, stderr=self.stderr, cwd=self.plugin_dir, env=dict(os.environ),
        )
        assert self.plugin.stdout is not None
        port = self.plugin.stdout.readline().decode().strip()
        if not port.isdigit():
            self.plugin.kill()
            self.plugin.wait(timeout=30)
            raise RuntimeError(f"the plugin printed {port!r} instead of its port: {self.plugin_stderr()[-2000:]}")
        self.channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        self.provider = provider_pb2_grpc.ResourceProviderStub(self.channel)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.channel is not None:
            self.channel.close()
        if self.plugin is not None:
            self.plugin.terminate()
            try:
                self.plugin.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.plugin.kill()
                self.plugin.wait(timeout=30)
        self.server.stop(grace=None)
        self.stderr.close()

    def plugin_stderr(self) -> str:
        """What the plugin wrote to stderr so far."""
        self.stderr.seek(0)
        return self.stderr.read().decode(errors="replace")

    def schema(self) -> dict[str, Any]:
        """The plugin's answer to ``GetSchema``."""
        assert self.provider is not None
        return json.loads(self.provider.GetSchema(provider_pb2.GetSchemaRequest(version=0), timeout=60).schema)

    def construct(
        self,
        type_: str,
        name: str,
        inputs: dict[str, Any],
        dependencies: Optional[dict[str, list[str]]] = None,
        dry_run: bool = False,
        depends_on: tuple[str, ...] = (),
    ) -> provider_pb2.ConstructResponse:
        """Send ``Construct`` as the engine does for a program's ``new <type>(name, inputs)``.

        Args:
            type_: the component's type token.
            name: its name.
            inputs: its inputs as JSON values (the engine's wire form: numbers are floats, unknowns the
                sentinel, secrets wrapped).
            dependencies: per input, the URNs of the resources it came from.
            dry_run: preview rather than update.
            depends_on: URNs the component depends on (``dependsOn``).

        Raises:
            grpc.RpcError: the plugin failed the construct (its message says why).
        """
        assert self.provider is not None
        struct = struct_pb2.Struct()
        struct.update(inputs)
        request = provider_pb2.ConstructRequest(
            project=PROJECT, stack=STACK, dryRun=dry_run, parallel=4, monitorEndpoint=self.address,
            type=type_, name=name, parent=STACK_URN, inputs=struct, organization="organization",
            inputDependencies={k: provider_pb2.ConstructRequest.PropertyDependencies(urns=v)
                               for k, v in (dependencies or {}).items()},
            dependencies=list(depends_on),
        )
        return self.provider.Construct(request, timeout=120)
