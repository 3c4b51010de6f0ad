"""Whether a ``KubernetesCompute`` job's objects still exist: its namespace, its StatefulSet, its coordinator pod.

A stack's outputs say what Pulumi made, not what is there now: the StatefulSet may have been
deleted with kubectl, or its namespace with everything in it. A port-forward to a pod that is not
there is answered 404, which is not slowness: :func:`look` asks the API server (the ``kubernetes``
client, the compute's kubeconfig and context), and :func:`gone` decides from the answers, so the
compute redeploys at once, or fails at once saying what to run, instead of waiting out
``ready_timeout`` for pods that will never come.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Optional

from runtime.agent.errors import TransportError


@dataclass(frozen=True)
class JobObjects:
    """What the API server answered for a job's objects: ``True`` there, ``False`` not found (404),
    ``None`` unknown (no permission to read it, or another answer).

    Attributes:
        namespace: the job's namespace (cluster-scoped: a user allowed into one namespace may not read it).
        workload: the job's StatefulSet (named as the job).
        coordinator_pod: node 0's pod, ``<job>-0``.
    """

    namespace: Optional[bool]
    workload: Optional[bool]
    coordinator_pod: Optional[bool]


LOOK_INTERVAL = 2.0
"""Seconds between looks at a starting job's objects while its port-forward fails."""
POD_APPEAR_TIMEOUT = 60.0
"""Seconds node 0's pod may be missing while its StatefulSet exists before the wait ends (the controller
makes pods within seconds; a quota or an admission webhook that refuses them never lets it)."""
Look = Callable[[str, str], JobObjects]
"""``(namespace, job) -> JobObjects``: one look at a job's objects."""


def gone(objects: JobObjects, namespace: str, job: str) -> Optional[str]:
    """Why the job cannot come up without a new deployment, or ``None`` while it may (its objects exist,
    or are not known to be gone).

    Args:
        objects: one look (:func:`look`).
        namespace: the job's namespace.
        job: the job's name (its StatefulSet's).
    """
    if objects.namespace is False:
        return f"namespace {namespace} is gone (deleted, with the job's objects in it)"
    if objects.workload is False:
        return f"the job's StatefulSet {job} is gone from namespace {namespace} (deleted outside Pulumi)"
    return None


class Vanishing:
    """``Expectation.stop`` of a job's wait: while the port-forward fails, look at the job's objects (every
    :data:`LOOK_INTERVAL` seconds); stop when they are gone, or when node 0's pod has not appeared for
    :data:`POD_APPEAR_TIMEOUT` seconds although its StatefulSet exists.

    Args:
        look: how to look at the objects.
        namespace: the job's namespace.
        job: its name.
        failing: whether the port-forward's last attempt failed.
        clock: monotonic clock, seconds.
    """

    def __init__(self, look: Look, *, namespace: str, job: str, failing: Callable[[], bool],
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._look, self._namespace, self._job, self._failing, self._clock = look, namespace, job, failing, clock
        self._next = 0.0
        self._missing_since: Optional[float] = None

    def __call__(self) -> Optional[str]:
        now = self._clock()
        if not self._failing() or now < self._next:
            return None
        self._next = now + LOOK_INTERVAL
        objects = self._look(self._namespace, self._job)
        why = gone(objects, self._namespace, self._job)
        if why is not None:
            return (f"{why}; run the driver again to deploy it afresh (its stack is refreshed first), or remove it "
                    f"with KubernetesCompute(..., name={self._job!r}).destroy()")
        if objects.coordinator_pod is not False or objects.workload is not True:
            self._missing_since = None
            return None
        if self._missing_since is None:
            self._missing_since = now
        if now - self._missing_since < POD_APPEAR_TIMEOUT:
            return None
        return (f"the StatefulSet {self._job} has made no pod {self._job}-0 in {POD_APPEAR_TIMEOUT:g} s; its events "
                f"say why (a quota, an admission webhook): kubectl describe statefulset {self._job} -n "
                f"{self._namespace}")


def look_with(api_client: Any) -> Look:
    """:data:`Look` through the ``kubernetes`` client.

    Args:
        api_client: a ``kubernetes.client.ApiClient`` for the cluster.
    """
    from kubernetes import client as k8s

    core, apps = k8s.CoreV1Api(api_client), k8s.AppsV1Api(api_client)

    def look(namespace: str, job: str) -> JobObjects:
        return JobObjects(namespace=_exists(lambda: core.read_namespace(namespace, _preload_content=False)),
                          workload=_exists(lambda: apps.read_namespaced_stateful_set(job, namespace,
                                                                                     _preload_content=False)),
                          coordinator_pod=_exists(lambda: core.read_namespaced_pod(f"{job}-0", namespace,
                                                                                   _preload_content=False)))

    return look


def _exists(read: Callable[[], Any]) -> Optional[bool]:
    """``True`` when ``read`` succeeds, ``False`` when the API server answers 404, ``None`` otherwise.

    Raises:
        TransportError: the API server could not be reached at all.
    """
    from kubernetes.client.rest import ApiException
    from urllib3.exceptions import HTTPError

    try:
        read().release_conn()
    except ApiException as exc:
        return False if exc.status == 404 else None
    except HTTPError as exc:
        raise TransportError(f"the API server did not answer: {exc}") from exc
    return True
