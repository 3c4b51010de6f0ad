"""A fake of Pulumi and a cluster behind ``KubernetesCompute``'s one seam (``runtime.workflow.stacks.Stacks``).

``up`` runs the inline program for real under Pulumi's mocks (``tests/components/componenttest.py``),
reads the StatefulSet it rendered, and "rolls it out" as a real local service job of that size,
with the rendered environment's processes per node, distribution, elastic bounds and PYTHONPATH
(an update that changes only the replicas scales the running job, as the StatefulSet controller
adds or removes pods with the highest ordinals; any other change replaces it, as a rolling update does); the stack's
outputs are the program's own, except the token, which is the one the job's agents really use (in a
cluster, the Secret's). A :class:`~testbed.fake_apiserver.FakeApiServer` forwards pod
``<job>-0`` on the agent port to that job's coordinator, for the real ``kubernetes`` client.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, Callable, Mapping, Optional

import pulumi

from runtime.agent import contract
from runtime.local.jobs import LocalJob, LocalJobSpec, start
from testbed.fake_apiserver import FakeApiServer
from tests.components.componenttest import Deployment, deploy

STATEFULSET = "kubernetes:apps/v1:StatefulSet"


def run_inline(program: Callable[[], None]) -> Deployment:
    """Run an inline program (one that calls ``pulumi.export``) under mocks; its outputs are the exports."""

    def exported() -> Mapping[str, Any]:
        root = pulumi.runtime.get_root_resource()
        root.outputs.clear()
        program()
        return dict(root.outputs)

    return deploy(exported)


def container_env(statefulset: Mapping[str, Any]) -> dict[str, str]:
    """The plain ``env`` values of a rendered StatefulSet's first container."""
    container = statefulset["spec"]["template"]["spec"]["containers"][0]
    return {e["name"]: e["value"] for e in container.get("env", []) if "value" in e}


class FakeCluster:
    """The ``Stacks`` seam, played by Pulumi's mocks and real local jobs.

    Args:
        tmp_path: where the jobs write their logs.
        pods_appear: whether pods become reachable through the API server (``False``: every
            port-forward is answered 404, as for a pod not scheduled yet).

    Attributes:
        calls: ``(operation, stack)`` of every seam call, in order.
        deployments: the last mocked deployment of each stack.
        jobs: the local job behind each stack.
        api: the fake API server.
    """

    def __init__(self, tmp_path: Path, pods_appear: bool = True) -> None:
        self.tmp_path = tmp_path
        self.pods_appear = pods_appear
        self.calls: list[tuple[str, str]] = []
        self.stacks: dict[str, dict[str, Any]] = {}
        self.deployments: dict[str, Deployment] = {}
        self.jobs: dict[str, LocalJob] = {}
        self.specs: dict[str, LocalJobSpec] = {}
        self.namespaces: dict[str, str] = {}
        self.deleted: dict[str, str] = {}
        self.gone_namespaces: set[str] = set()
        self._lock = threading.Lock()
        self.api = FakeApiServer(self.target, self.exists)

    def kubeconfig(self) -> str:
        """A kubeconfig file for the fake API server."""
        return str(self.api.kubeconfig(self.tmp_path / "kubeconfig"))

    def target(self, namespace: str, pod: str, port: int) -> Optional[tuple[str, int]]:
        """Where the API server forwards (namespace, pod, port): node 0's agent of the job behind the pod."""
        with self._lock:
            for name, job in self.jobs.items():
                if (self.pods_appear and pod == f"{name}-0" and namespace == self.namespaces[name]
                        and port == contract.AGENT_PORT):
                    return job.plan.addresses[0], job.plan.ports[0]
        return None

    def exists(self, kind: str, namespace: str, name: str) -> bool:
        """Whether the cluster has the object: ``Namespace`` (any not deleted), a job's ``StatefulSet``
        or its ``Pod`` ``<job>-0`` (while its local job runs)."""
        if namespace in self.gone_namespaces:
            return False
        if kind == "Namespace":
            return True
        with self._lock:
            for stack, job_namespace in self.namespaces.items():
                if job_namespace != namespace or stack in self.deleted:
                    continue
                if (kind, name) == ("StatefulSet", stack):
                    return True
                if (kind, name) == ("Pod", f"{stack}-0"):
                    return self.pods_appear and stack in self.jobs
        return False

    def delete(self, stack: str, what: str) -> None:
        """Delete a job's objects outside Pulumi, as kubectl would: ``workload`` (its StatefulSet, and so its
        pods) or ``namespace`` (everything in it); the stack keeps its state and outputs."""
        self.deleted[stack] = what
        if what == "namespace":
            self.gone_namespaces.add(self.namespaces[stack])
        self._stop(stack, forget=False)

    def outputs(self, stack: str) -> Optional[Mapping[str, Any]]:
        self.calls.append(("outputs", stack))
        return dict(self.stacks[stack]) if stack in self.stacks else None

    def up(self, stack: str, program: Callable[[], None], refresh: bool = False) -> Mapping[str, Any]:
        self.calls.append(("up --refresh" if refresh else "up", stack))
        if stack in self.deleted:
            if not refresh:  # the state still holds the deleted objects: nothing differs, nothing is made
                return dict(self.stacks[stack])
            del self.deleted[stack]  # read back from the cluster: gone from the state, so made again
            self.deployments.pop(stack, None)
        deployment = run_inline(program)
        statefulset = deployment.one(STATEFULSET).inputs
        env = container_env(statefulset)
        pythonpath = tuple(p for p in env.get("PYTHONPATH", "").split(":")
                           if p and p != contract.BUNDLE_MOUNT_PATH)
        replicas = int(statefulset["spec"]["replicas"])
        previous = self.deployments.get(stack)
        running = self.jobs.get(stack)
        if (running is not None and previous is not None
                and previous.one(STATEFULSET).inputs["spec"]["template"] == statefulset["spec"]["template"]):
            running.scale(self.specs[stack], replicas, grace=5.0)
            self.deployments[stack] = deployment
            self.stacks[stack] = {**deployment.outputs, "token": running.token}
            return dict(self.stacks[stack])
        bounds = {k: int(env[v]) for k, v in (("min_workers", contract.MIN_WORKERS),
                                              ("max_workers", contract.MAX_WORKERS)) if v in env}
        spec = LocalJobSpec(workers=replicas, num_proc=int(env[contract.NUM_PROC]),
                            mode="service", distribution=env[contract.DISTRIBUTION], master_port=0,
                            grace_period=1.0, log_dir=str(self.tmp_path / f"{stack}-{len(self.calls)}"),
                            pythonpath=pythonpath, **bounds)
        self._stop(stack)
        job = start(spec)
        job.wait_ready(120)
        self.specs[stack] = spec
        with self._lock:
            self.jobs[stack] = job
            self.namespaces[stack] = statefulset["metadata"]["namespace"]
        self.deployments[stack] = deployment
        self.stacks[stack] = {**deployment.outputs, "token": job.token}
        return dict(self.stacks[stack])

    def destroy(self, stack: str) -> None:
        self.calls.append(("destroy", stack))
        self._stop(stack)
        self.stacks.pop(stack, None)

    def close(self) -> None:
        """Stop every job and the API server."""
        for stack in list(self.jobs):
            self._stop(stack)
        self.api.close()

    def _stop(self, stack: str, forget: bool = True) -> None:
        with self._lock:
            job = self.jobs.pop(stack, None)
            if forget:
                self.namespaces.pop(stack, None)
        if job is not None:
            job.stop(timeout=15)
