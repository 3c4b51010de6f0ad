"""A stand-in for the one Kubernetes API the port-forward uses: ``GET /api/v1/namespaces/NS/pods/POD/portforward``
upgraded to a WebSocket, forwarding to a real local port.

The protocol is the API server's (kubelet's) WebSocket port-forward, read from its source:
kubernetes/kubernetes ``pkg/kubelet/cri/streaming/portforward/websocket.go`` (v1.33): subprotocol
``v4.channel.k8s.io``, binary frames whose first byte is the channel; per requested port a data
channel (``2i``) and an error channel (``2i + 1``), each opened by a frame carrying the port as an
unsigned 16-bit little-endian integer; a failure to reach the port in the pod is written to the
error channel as text and the streams close. Frames follow RFC 6455 (client frames masked, server
frames not). The client side under test is the real ``kubernetes`` package
(``kubernetes/stream/ws_client.py``, ``PortForward``), as installed.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import socket
import socketserver
import struct
import threading
from pathlib import Path
from typing import Callable, Optional
from urllib.parse import parse_qs, urlparse

WEBSOCKET_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
PROTOCOL = "v4.channel.k8s.io"
PORTFORWARD_PATH = ("api", "v1", "namespaces", "pods", "portforward")
"""The fixed parts of ``/api/v1/namespaces/NS/pods/POD/portforward``."""
Target = Callable[[str, str, int], Optional[tuple[str, int]]]
"""(namespace, pod, port) -> the real (host, port) behind it, or None when the pod does not exist."""
Exists = Callable[[str, str, str], bool]
"""(kind, namespace, name) -> whether the object exists, for a GET of a ``Namespace``, ``Pod`` or
``StatefulSet`` (the paths of ``read_namespace``, ``read_namespaced_pod``,
``read_namespaced_stateful_set``: ``/api/v1/namespaces/NS``, ``/api/v1/namespaces/NS/pods/NAME``,
``/apis/apps/v1/namespaces/NS/statefulsets/NAME``); a missing one is answered 404 with a ``Status``, as
the API server answers."""


def frame(payload: bytes, opcode: int = 0x2) -> bytes:
    """One unmasked, final server frame."""
    head = bytes([0x80 | opcode])
    size = len(payload)
    if size < 126:
        head += bytes([size])
    elif size < 1 << 16:
        head += bytes([126]) + struct.pack("!H", size)
    else:
        head += bytes([127]) + struct.pack("!Q", size)
    return head + payload


def read_exact(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise EOFError
        data += chunk
    return data


def read_frame(sock: socket.socket) -> tuple[int, bytes]:
    """One client frame: (opcode, unmasked payload)."""
    first, second = read_exact(sock, 2)
    size = second & 0x7F
    if size == 126:
        size = struct.unpack("!H", read_exact(sock, 2))[0]
    elif size == 127:
        size = struct.unpack("!Q", read_exact(sock, 8))[0]
    mask = read_exact(sock, 4) if second & 0x80 else b"\0\0\0\0"
    payload = read_exact(sock, size)
    return first & 0x0F, bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


class FakeApiServer:
    """Serves pod port-forwards on 127.0.0.1 to the real ports ``target`` names; records every request.

    Args:
        target: where each (namespace, pod, port) really is.
        token: the bearer token clients must send.

    Attributes:
        requests: ``(path with query, authorization header)`` of every request, in arrival order.
    """

    def __init__(self, target: Target, exists: Optional[Exists] = None,
                 token: str = "fake-cluster-token") -> None:  # noqa: S107 - a test token
        self.target = target
        self.exists = exists
        self.token = token
        self.requests: list[tuple[str, str]] = []
        server = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                server._handle(self.request)

        self._server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def kubeconfig(self, path: Path) -> Path:
        """Write a kubeconfig for this server (context ``fake``) to ``path``; returns ``path``."""
        path.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "fake",
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "users": [{"name": "fake", "user": {"token": self.token}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake"}}],
        }))
        return path

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _handle(self, conn: socket.socket) -> None:
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = conn.recv(4096)
            if not chunk:
                return
            head += chunk
        lines = head.split(b"\r\n\r\n", 1)[0].decode().split("\r\n")
        target = lines[0].split(" ")[1]
        headers = {k.strip().lower(): v.strip() for k, v in (line.split(":", 1) for line in lines[1:] if ":" in line)}
        self.requests.append((target, headers.get("authorization", "")))
        parts = urlparse(target).path.strip("/").split("/")
        if headers.get("authorization") != f"Bearer {self.token}":
            return self._status(conn, 401, "Unauthorized")
        if len(parts) != 7 or (parts[0], parts[1], parts[2], parts[4], parts[6]) != PORTFORWARD_PATH:
            return self._get(conn, parts)
        namespace, pod = parts[3], parts[5]
        port = int(parse_qs(urlparse(target).query)["ports"][0])
        real = self.target(namespace, pod, port)
        if real is None:
            return self._status(conn, 404, f'pods "{pod}" not found')
        key = (headers["sec-websocket-key"] + WEBSOCKET_GUID).encode()
        accept = base64.b64encode(hashlib.sha1(key).digest())  # noqa: S324 - RFC 6455's handshake, not security
        conn.sendall(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                     b"Sec-WebSocket-Accept: " + accept + f"\r\nSec-WebSocket-Protocol: {PROTOCOL}\r\n\r\n".encode())
        port_bytes = struct.pack("<H", port)
        conn.sendall(frame(b"\x00" + port_bytes) + frame(b"\x01" + port_bytes))
        try:
            upstream = socket.create_connection(real, timeout=5)
        except OSError as exc:
            conn.sendall(frame(f"\x01error forwarding port {port} to pod {pod}, uid : {exc}".encode())
                         + frame(b"\x03\xe8", opcode=0x8))
            return None
        upstream.settimeout(None)
        for sock in (conn, upstream):  # no Nagle delay, as Go (the API server, the kubelet) sets on every TCP conn
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        threading.Thread(target=self._pump_down, args=(upstream, conn), daemon=True).start()
        try:
            while True:
                opcode, payload = read_frame(conn)
                if opcode == 0x8:
                    break
                if opcode == 0x9:
                    conn.sendall(frame(payload, opcode=0xA))
                elif opcode == 0x2 and payload[:1] == b"\x00":
                    upstream.sendall(payload[1:])
        except (EOFError, OSError):
            pass
        with contextlib.suppress(OSError):
            upstream.shutdown(socket.SHUT_RDWR)
        upstream.close()
        return None

    def _read_object(self, parts: list[str]) -> Optional[tuple[str, str, str, bool]]:
        """``(kind, namespace, name, exists)`` for a GET of a namespace, a pod or a StatefulSet, else ``None``."""
        if self.exists is None:
            return None
        if len(parts) == 4 and parts[:3] == ["api", "v1", "namespaces"]:
            kind, namespace, name = "Namespace", parts[3], parts[3]
        elif len(parts) == 6 and parts[:3] == ["api", "v1", "namespaces"] and parts[4] == "pods":
            kind, namespace, name = "Pod", parts[3], parts[5]
        elif len(parts) == 7 and parts[:4] == ["apis", "apps", "v1", "namespaces"] and parts[5] == "statefulsets":
            kind, namespace, name = "StatefulSet", parts[4], parts[6]
        else:
            return None
        return kind, namespace, name, self.exists(kind, namespace, name)

    def _get(self, conn: socket.socket, parts: list[str]) -> None:
        """The API server's answer to a GET of one object: the object (its metadata), or 404 as a Status."""
        found = self._read_object(parts)
        if found is None:
            return self._status(conn, 404, "the server could not find the requested resource")
        kind, namespace, name, exists = found
        if not exists:
            plural = {"Namespace": "namespaces", "Pod": "pods", "StatefulSet": "statefulsets.apps"}[kind]
            return self._status(conn, 404, f'{plural} "{name}" not found')
        metadata = {"name": name} if kind == "Namespace" else {"name": name, "namespace": namespace}
        body = json.dumps({"kind": kind, "apiVersion": "apps/v1" if kind == "StatefulSet" else "v1",
                           "metadata": metadata}).encode()
        conn.sendall(f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n"
                     f"Connection: close\r\n\r\n".encode() + body)
        return None

    @staticmethod
    def _pump_down(upstream: socket.socket, conn: socket.socket) -> None:
        try:
            while True:
                data = upstream.recv(65536)
                if not data:
                    break
                conn.sendall(frame(b"\x00" + data))
            conn.sendall(frame(b"\x03\xe8", opcode=0x8))
        except OSError:
            pass

    @staticmethod
    def _status(conn: socket.socket, code: int, message: str) -> None:
        body = json.dumps({"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message,
                           "code": code}).encode()
        conn.sendall(f"HTTP/1.1 {code} {message}\r\nContent-Type: application/json\r\nContent-Length: {len(body)}"
                     f"\r\nConnection: close\r\n\r\n".encode() + body)
