"""A local port relayed to a pod's port through the Kubernetes API, without kubectl.

:class:`Relay` is the local side: it listens on ``127.0.0.1`` (a free port) and gives every accepted
connection a stream of its own to the remote port, opened by a *connector* (a callable returning a
connected socket), then copies bytes both ways until either side closes. :func:`pod_connector` is
the connector for a pod: each call opens a port-forward with the ``kubernetes`` client
(``kubernetes.stream.portforward`` on ``connect_get_namespaced_pod_portforward``, one WebSocket per
connection, as the API server's WebSocket port-forward carries one stream per port) and returns its
socket. Tests connect the relay to a real local agent instead.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from typing import Any, Callable, Optional

from runtime.agent.errors import TransportError

Connector = Callable[[], Any]
"""Opens one new stream to the remote port: returns a connected, blocking socket(-like) object with
``recv``, ``sendall``, ``shutdown`` and ``close``; raises :class:`OSError` or
:class:`~runtime.agent.errors.TransportError` (with a message) when it cannot."""
HEADERS_SEPARATOR = " -+-+- "
"""Where websocket-client's handshake error (the reason of the client's ``ApiException``) goes on
from the status line to the answer's headers and body."""
CHUNK = 256 * 1024
"""Bytes read at a time from either side."""


class Relay:
    """Listen on a local port; relay each connection to the remote end the connector opens.

    Args:
        connect: opens a stream to the remote port (see :data:`Connector`).
        host: the local address to listen on.
        describe: what the remote end is, for messages (e.g. ``pod trainer-0:32300 in default``).

    Attributes:
        last_error: the last connector failure, e.g. the API server's answer for a pod that does not
            exist yet; ``None`` until one happens.
    """

    def __init__(self, connect: Connector, host: str = "127.0.0.1", describe: str = "the remote port") -> None:
        self._connect = connect
        self.describe = describe
        self.last_error: Optional[str] = None
        self._listener = socket.create_server((host, 0))
        bound_host, port = self._listener.getsockname()[:2]
        self._url = f"http://{bound_host}:{port}"
        self._lock = threading.Lock()
        self._open: set[Any] = set()
        self._closed = False
        self._thread = threading.Thread(target=self._accept, name=f"relay to {describe}", daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        """The relay's base URL, ``http://127.0.0.1:<port>``."""
        return self._url

    def close(self) -> None:
        """Stop listening and close every relayed connection."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            sockets = list(self._open)
            self._open.clear()
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        for sock in sockets:
            _close(sock)
        self._thread.join(timeout=5.0)

    def __enter__(self) -> Relay:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), name=f"relay connection to {self.describe}",
                             daemon=True).start()

    def _ended(self, failure: OSError) -> None:
        if not self._closed:
            self.last_error = f"port-forward to {self.describe} ended: {failure}"

    def _serve(self, client: socket.socket) -> None:
        _no_delay(client)
        try:
            remote = self._connect()
        except (OSError, TransportError) as exc:
            self.last_error = f"port-forward to {self.describe} failed: {exc}"
            _close(client)
            return
        _no_delay(remote)
        with self._lock:
            if self._closed:
                _close(client)
                _close(remote)
                return
            self._open.update((client, remote))
        self.last_error = None
        upstream = threading.Thread(target=_pump, args=(client, remote), daemon=True,
                                    name=f"relay to {self.describe}: upstream")
        upstream.start()
        _pump(remote, client, failed=self._ended)
        _close(client)
        upstream.join()
        with self._lock:
            self._open.difference_update((client, remote))
        _close(remote)


def _pump(source: Any, sink: Any, failed: Optional[Callable[[OSError], None]] = None) -> None:
    """Copy ``source`` to ``sink`` until ``source`` ends or fails, then end ``sink``'s writing side.

    A failure is handed to ``failed`` first, so it is on record before the other side sees the end."""
    try:
        while True:
            data = source.recv(CHUNK)
            if not data:
                break
            sink.sendall(data)
    except OSError as exc:
        if failed is not None:
            failed(exc)
    with contextlib.suppress(OSError):
        sink.shutdown(socket.SHUT_WR)


def _no_delay(sock: Any) -> None:
    """Send small writes at once (no Nagle): a relayed HTTP exchange is a few small writes each way, and
    holding one back for the peer's delayed ACK costs about 40 ms per call. Sockets that are not TCP
    (a port-forward's socket pair) have no such delay and ignore it."""
    with contextlib.suppress(OSError, AttributeError):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def _close(sock: Any) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        sock.close()


def pod_connector(api_client: Any, namespace: str, pod: str, port: int) -> Connector:
    """A connector to ``pod``'s ``port`` through the API server's port-forward (no kubectl).

    Args:
        api_client: a ``kubernetes.client.ApiClient`` configured for the cluster (e.g. from
            ``kubernetes.config.new_client_from_config``).
        namespace: the pod's namespace.
        pod: the pod's name (a service job's node 0 is ``<job>-0``).
        port: the container port (the agent's, 32300 by default).

    Returns:
        A callable that opens one forwarded stream per call and returns its socket.
    """
    from kubernetes import client as k8s_client
    from kubernetes.client.rest import ApiException
    from kubernetes.stream import portforward

    core = k8s_client.CoreV1Api(api_client)

    def connect() -> Any:
        try:
            forward = portforward(core.connect_get_namespaced_pod_portforward, pod, namespace, ports=str(port))
        except ApiException as exc:
            reason = str(exc.reason or exc).split(HEADERS_SEPARATOR, 1)[0].strip()
            raise TransportError(f"the API server refused the port-forward to pod {pod} in {namespace}: {reason}",
                                 exc.status or None) from exc
        stream = forward.socket(port)
        stream.setblocking(True)
        return _ForwardedSocket(forward, stream, port)

    return connect


class _ForwardedSocket:
    """A port-forward's socket; closing it closes the forward, and its error channel's message
    (e.g. ``connection refused`` inside the pod) becomes the error of a read that found the stream
    ended or reset. The ``kubernetes`` client records that message before it closes the stream
    (``kubernetes/stream/ws_client.py``, ``PortForward._proxy``)."""

    def __init__(self, forward: Any, stream: Any, port: int) -> None:
        self._forward = forward
        self._stream = stream
        self._port = port

    def recv(self, size: int) -> bytes:
        try:
            data = self._stream.recv(size)
        except OSError:
            # The client closes its end of the socket pair once the error channel has spoken; data
            # it had not read yet turns that close into a reset. The error channel says why.
            self._raise_forward_error()
            raise
        if not data:
            self._raise_forward_error()
        return data

    def _raise_forward_error(self) -> None:
        error = self._forward.error(self._port)
        if error:
            raise OSError(error)

    def sendall(self, data: bytes) -> None:
        self._stream.sendall(data)

    def shutdown(self, how: int) -> None:
        self._stream.shutdown(how)

    def close(self) -> None:
        self._forward.close()
