"""Client of a service-mode job: ``JobClient(url, token).call("pkg.mod:fn", *args, **kwargs) -> list``.

httpx is imported here and in ``runtime.workflow`` only, so ``import runtime`` stays standard-library
only. Failures are rebuilt from the wire format (``runtime.agent.spec.wire``) into the exceptions of
``runtime.agent.errors``, re-exported from ``runtime``:

* ``RemoteError`` - the function raised on a rank (rank, node rank, type, message, remote traceback);
* ``CallTimeout`` - the deadline passed (``pending_ranks``: who had not answered);
* ``WorkerMembershipChanged`` - the world changed while the call was in flight;
* ``NodeFailed``, ``CallCancelled`` - a node on the path failed; the call was failed from outside;
* ``JobEnded`` - the job has ended (``status``, ``reason``: its root cause, ``exit_code``): every call
  after the end raises it, once the client has learnt the verdict (from a call answered 410, or from
  ``/info`` right after a call failed with ``NodeFailed`` or no answer), even when nobody answers any
  more (a failed service job's coordinator keeps answering for a few seconds, then exits), until
  ``/info`` answers with a world that has not ended (the coordinator's pod restarted);
* ``Unauthorized`` - 401, wrong or missing token;
* ``CodeMissing`` - the call named a synced tree the job does not hold (send it: :meth:`JobClient.send_code`);
* ``TransportError`` - anything else, with ``status``: 400 malformed call, 409 batch-mode job,
  413 body over the cap, 415 pickle not enabled, 503 job not ready; ``None`` when no answer came.

httpx's own exceptions are translated at this one boundary (``raise ... from``).
"""

from __future__ import annotations

import base64
import json
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, Sequence, Union

import httpx

from runtime.agent import contract
from runtime.agent.errors import CallTimeout, JobEnded, NodeFailed, TransportError, Unauthorized
from runtime.agent.spec.status import FAILED, TERMINAL
from runtime.agent.spec.wire import (
    JSON,
    SERIALIZATIONS,
    check_json_arguments,
    error_from_body,
    pack_arguments,
    unpack_result,
)
from runtime.output_reader import OutputChunk, OutputReader

ANSWER_SLACK = 10.0
"""Seconds the client waits for the coordinator beyond a call's own timeout (the coordinator answers
with ``CallTimeout`` at the deadline; this only covers a coordinator that cannot answer at all)."""
CONNECT_TIMEOUT = 10.0
"""Seconds to establish a connection to the coordinator."""
READ_TIMEOUT = 30.0
"""Seconds to wait for ``info()`` and ``members()``."""
VERDICT_WAIT = 3.0
"""Seconds a client whose call failed with ``NodeFailed`` (or got no answer) asks ``/info`` whether the
job ended, before it raises the call's own error."""
CODE_TIMEOUT = 120.0
"""Seconds sending a tree may take (every node unpacks it before the coordinator answers)."""


class CodeMissing(TransportError):
    """The job does not hold the synced tree a call named: send it (:meth:`JobClient.send_code`), call again.

    Attributes:
        digest: the tree's digest.
    """

    def __init__(self, message: str, digest: str) -> None:
        super().__init__(message, 409)
        self.digest = digest


@dataclass(frozen=True)
class JobInfo:
    """The coordinator's ``GET /info``.

    Attributes:
        job: job id.
        node_id: the coordinator's stable node id.
        node_rank: its node rank in the current world; ``None`` while the world is forming or when
            the answering agent is not in it.
        address: its address.
        num_proc: processes per node on the coordinator.
        generation: current world generation (0 while forming).
        status: ``forming``, ``running`` or a terminal status.
        mode: ``batch`` or ``service``.
        raw: the whole JSON object.
        reason: for a job that has ended, why (its root cause, or what stopped it); ``""`` otherwise.
    """

    job: str
    node_id: int
    node_rank: Optional[int]
    address: str
    num_proc: int
    generation: int
    status: str
    mode: str
    raw: Mapping[str, Any]
    reason: str = ""


@dataclass(frozen=True)
class MemberInfo:
    """One node in the coordinator's membership snapshot, as the client reads it (the agent's node-side state
    machine is ``runtime.agent.rendezvous.member.Member``)."""

    node_id: int
    addr: str
    port: int
    num_proc: int
    state: str


@dataclass(frozen=True)
class Membership:
    """The coordinator's ``GET /members``: a versioned snapshot.

    Attributes:
        job: job id.
        generation: world generation the snapshot belongs to.
        status: the world's status.
        members: the nodes, in node-id order.
        raw: the whole JSON object (fields beyond these included).
    """

    job: str
    generation: int
    status: str
    members: tuple[MemberInfo, ...]
    raw: Mapping[str, Any]


class JobClient:
    """Calls functions on every rank of a service-mode job, through its coordinator.

    Args:
        url: the coordinator's base URL, e.g. ``http://127.0.0.2:40123``.
        token: the job's bearer token.
        serialization: ``json`` (default) or ``pickle`` (the deployment must allow it).
        transport: an httpx transport (tests pass ``httpx.MockTransport``); default: HTTP.
        verdict_wait: seconds a call failed by ``NodeFailed`` asks ``/info`` if the job ended (:data:`VERDICT_WAIT`).
    """

    def __init__(self, url: str, token: str, *, serialization: str = JSON,
                 transport: Optional[httpx.BaseTransport] = None, verdict_wait: float = VERDICT_WAIT) -> None:
        if serialization not in SERIALIZATIONS:
            raise ValueError(f"serialization={serialization!r} is invalid: use one of {', '.join(SERIALIZATIONS)}")
        self.url = url.rstrip("/")
        self.serialization = serialization
        self._verdict_wait = verdict_wait
        self._ended: Optional[JobInfo] = None
        self._http = httpx.Client(
            base_url=self.url, transport=transport,
            headers={contract.AUTH_HEADER: f"{contract.AUTH_SCHEME} {token}", "Content-Type": "application/json"},
        )

    @classmethod
    def from_file(cls, path: Union[str, Path], **options: Any) -> JobClient:
        """A client for the job described by a connection file (``python -m runtime launch --mode service``).

        Raises:
            OSError: the file cannot be read.
            ValueError: it is not a connection file.
        """
        data = json.loads(Path(path).read_text())
        if not isinstance(data, dict) or not isinstance(data.get("url"), str) or not isinstance(data.get("token"), str):
            raise ValueError(f"{path} is not a connection file: expected an object with 'url' and 'token'")
        return cls(data["url"], data["token"], **options)

    def call(self, fn: str, *args: Any, timeout: Optional[float] = None, node_ranks: Optional[Sequence[int]] = None,
             **kwargs: Any) -> list[Any]:
        """Run ``fn(*args, **kwargs)`` on every rank (or on the processes of the nodes in ``node_ranks``).

        Keyword arguments named ``timeout`` or ``node_ranks`` cannot reach the function this way: use
        :meth:`invoke`, which takes the function's arguments as a sequence and a mapping.

        Args:
            fn: ``"module:qualname"``, importable in the worker processes.
            *args: positional arguments (JSON values, or anything picklable with pickle).
            timeout: seconds the whole call may take; ``None`` waits as long as it runs.
            node_ranks: node ranks to run on, e.g. ``[0]``; ``None`` for every node that runs processes
                (in a ``ray`` or ``monarch`` job, node 0: the driver).
            **kwargs: keyword arguments.

        Returns:
            One result per rank, in global rank order.

        Raises:
            RemoteError, CallTimeout, WorkerMembershipChanged, NodeFailed, CallCancelled, Unauthorized,
            TransportError: see the module docstring.
            TypeError: an argument is not plain JSON data (with ``json``): a tuple, a key that is not a
                string (which JSON would change into a list, a string) or another type; names which.
        """
        return self.invoke(fn, args, kwargs, timeout=timeout, node_ranks=node_ranks)

    def invoke(self, fn: str, args: Sequence[Any] = (), kwargs: Optional[Mapping[str, Any]] = None, *,
               timeout: Optional[float] = None, node_ranks: Optional[Sequence[int]] = None,
               output: Optional[Callable[[OutputChunk], None]] = None, code: Optional[str] = None) -> list[Any]:
        """:meth:`call` with the function's arguments as a sequence and a mapping (any keyword reaches it).

        Args:
            code: the digest of the synced tree the ranks import from (``runtime.agent.code``); ``None``:
                their own PYTHONPATH. Raises :class:`CodeMissing` when the job does not hold it.
            output: receives what the ranks write to stdout and stderr while the call runs, chunk by
                chunk, in order per rank and stream, from a thread of this client, while the call runs;
                everything written before a rank answered has been given to it when this returns or
                raises. ``None`` (the default): the output is not fetched (it stays in the job's logs).
        """
        if self.serialization == JSON:
            check_json_arguments(fn, args, kwargs or {})
        body: dict[str, Any] = {"fn": fn, "serialization": self.serialization, "timeout": timeout,
                                "workers": list(node_ranks) if node_ranks is not None else None,
                                **pack_arguments(tuple(args), dict(kwargs or {}), self.serialization)}
        if code is not None:
            body["code"] = code
        reader = None
        if output is not None:
            body["output"] = uuid.uuid4().hex
            reader = OutputReader(self.read_output, body["output"], output)
        try:
            content = json.dumps(body).encode()
        except (TypeError, ValueError) as exc:
            raise TypeError(f"arguments of {fn} are not JSON-serialisable ({exc}): pass plain data, or use "
                            f"serialization='pickle' with a deployment that allows it") from exc
        read = None if timeout is None else timeout + ANSWER_SLACK
        if self._ended is not None:
            self.info()  # the coordinator may have restarted into a new world, which drops the verdict
        if self._ended is not None:
            raise self._job_ended(self._ended)
        if reader is not None:
            reader.start()
        ran = True
        try:
            answer = self._post_call(fn, content, read, timeout)
        except BaseException as exc:
            # Refused before anything ran: there is no output to wait for. Interrupted (Ctrl-C): return
            # at once; the interrupted exchange's connection is closed (httpcore closes a connection
            # whose answer was not read), and the coordinator, seeing it close, cancels the call.
            ran = not isinstance(exc, CodeMissing) and isinstance(exc, Exception)
            raise
        finally:
            if reader is not None:
                reader.finish(wait=ran)
        serialization = answer.get("serialization", JSON)
        return [unpack_result(value, serialization) for value in answer.get("results", [])]

    def _post_call(self, fn: str, content: bytes, read: Optional[float], timeout: Optional[float]) -> dict[str, Any]:
        """``POST /call`` with the encoded call; the coordinator's answer.

        Raises:
            CallTimeout: no answer within ``read`` seconds.
            JobEnded: the job has ended (remembered, so :meth:`info` and later calls say why), also when
                the call failed because it ended.
            NodeFailed, TransportError: as :meth:`invoke`.
        """
        try:
            return self._request("POST", contract.ROUTE_CALL, content, httpx.Timeout(read, connect=CONNECT_TIMEOUT))
        except httpx.TimeoutException as exc:
            raise CallTimeout(timeout, (), fn, f"the coordinator did not answer within {read:g} s") from exc
        except JobEnded as exc:
            self._ended = self._ended or JobInfo(job="", node_id=0, node_rank=None, address="", num_proc=0,
                                                 generation=0, status=exc.status, mode="",
                                                 raw={"exit_code": exc.exit_code}, reason=exc.reason)
            raise
        except (NodeFailed, TransportError) as exc:
            if isinstance(exc, TransportError) and exc.status is not None:
                raise
            ended = self._verdict()
            if ended is None:
                raise
            raise self._job_ended(ended) from exc

    def info(self) -> JobInfo:
        """The coordinator's identity and the world's status; for a job that has ended, its status and
        ``reason`` (once learnt, also when the coordinator no longer answers). A status that is not
        terminal (a StatefulSet restarted the coordinator's pod into a new world) drops the verdict
        learnt, so calls go to the new world.

        Raises:
            TransportError: the coordinator did not answer, and the job is not known to have ended.
        """
        try:
            raw = self._get(contract.ROUTE_INFO)
        except TransportError:
            if self._ended is not None:
                return self._ended
            raise
        node_rank = raw.get("node_rank")
        info = JobInfo(job=str(raw.get("job", "")), node_id=int(raw.get("node_id", 0)),
                       node_rank=None if node_rank is None else int(node_rank), address=str(raw.get("addr", "")),
                       num_proc=int(raw.get("num_proc", 0)), generation=int(raw.get("generation", 0)),
                       status=str(raw.get("status", "")), mode=str(raw.get("mode", "")), raw=raw,
                       reason=str(raw.get("message", "")))
        self._ended = info if info.status in TERMINAL else None  # a new world (the pod restarted) drops it
        return info

    def _verdict(self) -> Optional[JobInfo]:
        """Ask ``/info`` for up to ``verdict_wait`` seconds whether the job has ended; its info if so."""
        deadline = time.monotonic() + self._verdict_wait
        while time.monotonic() < deadline:
            try:
                info = self.info()
            except TransportError:
                return self._ended
            if info.status in TERMINAL:
                return info
            time.sleep(0.1)
        return None

    @staticmethod
    def _job_ended(info: JobInfo) -> JobEnded:
        return JobEnded(info.status, info.reason, int(info.raw.get("exit_code", 1 if info.status == FAILED else 0)))

    def members(self) -> Membership:
        """The coordinator's membership snapshot."""
        raw = self._get(contract.ROUTE_MEMBERS)
        members = tuple(
            MemberInfo(int(m["node_id"]), str(m["addr"]), int(m["port"]), int(m["num_proc"]), str(m.get("state", "")))
            for m in raw.get("members", [])
        )
        return Membership(str(raw.get("job", "")), int(raw.get("generation", 0)), str(raw.get("status", "")),
                          members, raw)

    def close(self) -> None:
        """Close the connection pool."""
        self._http.close()

    def __enter__(self) -> JobClient:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def send_code(self, digest: str, archive: bytes) -> int:
        """Send a synced tree to every node of the job (``POST /code``, down the job's tree).

        Args:
            digest: the tree's digest (``runtime.agent.spec.archive.tree_digest``).
            archive: the tree, packed (``runtime.agent.spec.archive.pack``).

        Returns:
            How many nodes hold it now.

        Raises:
            TransportError: 400 the archive was refused (unsafe, malformed, not matching the digest),
                413 it is over the body cap, 502 a node did not take it.
        """
        content = json.dumps({"digest": digest, "archive": base64.b64encode(archive).decode("ascii")}).encode()
        try:
            answer = self._request("POST", contract.ROUTE_CODE, content,
                                   httpx.Timeout(CODE_TIMEOUT, connect=CONNECT_TIMEOUT))
        except httpx.TimeoutException as exc:
            raise TransportError(f"POST {self.url}{contract.ROUTE_CODE}: no answer within {CODE_TIMEOUT:g} s") from exc
        return int(answer.get("nodes", 0))

    def read_output(self, key: str, after: int, wait: float) -> dict[str, Any]:
        """One read of a call's output (``POST /output``; ``runtime.agent.service.output_relay``)."""
        content = json.dumps({"output": key, "after": after, "wait": wait}).encode()
        return self._request("POST", contract.ROUTE_OUTPUT, content,
                             httpx.Timeout(wait + READ_TIMEOUT, connect=CONNECT_TIMEOUT))

    def _get(self, path: str) -> dict[str, Any]:
        try:
            return self._request("GET", path, None, httpx.Timeout(READ_TIMEOUT, connect=CONNECT_TIMEOUT))
        except httpx.TimeoutException as exc:
            raise TransportError(f"GET {self.url}{path}: no answer within {READ_TIMEOUT:g} s") from exc

    def _request(self, method: str, path: str, content: Optional[bytes], timeout: httpx.Timeout) -> dict[str, Any]:
        """One exchange; the answer's JSON object, or the error it describes raised.

        Raises:
            httpx.TimeoutException: left to the caller, which knows what a timeout means for it.
        """
        try:
            response = self._http.request(method, path, content=content, timeout=timeout)
        except httpx.TimeoutException:
            raise
        except httpx.HTTPError as exc:
            raise TransportError(f"{method} {self.url}{path} failed: {exc}") from exc
        try:
            body = response.json()
        except ValueError:
            body = {}
        if not isinstance(body, dict):
            body = {}
        if response.is_success:
            return body
        error = error_from_body(body)
        if error is not None:
            raise error
        message = f"{method} {self.url}{path}: {response.status_code} {body.get('error', response.reason_phrase)}"
        if response.status_code == 409 and isinstance(body.get("code_missing"), str):
            raise CodeMissing(message, body["code_missing"])
        if response.status_code == 401:
            raise Unauthorized(message, 401)
        raise TransportError(message, response.status_code)

