"""A simulated API server for the deterministic simulation: the project's test API server
(tests/support/apiserver's KubeApi: storage, list+watch with bookmarks and 410s, strategic
merge patch, graceful deletion, the Node authorizer, faults) run in-process on the virtual
clock, answered through an httpx transport instead of a socket.

SimApiServer holds the cluster: it outlives any one daemon, as kube-apiserver outlives a
killed kubelet. Its transport() is what the daemon's ApiClients get in place of HTTPS
(httpx's way: swap the transport, not the client). Faults come from KubeApi's own Faults
(fail, latency, hang, reset: on virtual time) plus what only a transport can do: open
watches cut (a connection reset), an answer lost after the server acted. Every write is
recorded with the object before and after, for the invariants.
"""

from __future__ import annotations

import functools
import json
import ssl
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs

import httpx
import trio

from pykubelet.ports.apiserver import Credentials
from tests.support.apiserver.api import KubeApi, Settings
from tests.support.apiserver.faults import Faults
from tests.support.apiserver.httpserver import Request
from tests.support.apiserver.pki import CertificateAuthority, Identity
from tests.support.apiserver.store import Store

SERVER = "https://sim-apiserver:6443"
NODE_TOKEN = "sim-node-token"
ADMIN_TOKEN = "sim-admin-token"
_WRITE_METHODS = ("POST", "PUT", "PATCH", "DELETE")


@functools.cache
def _certificate_authority() -> CertificateAuthority:
    # Only its PEM is read (the kube-root-ca.crt ConfigMaps): one per process is enough.
    return CertificateAuthority("pykubelet-sim-ca")


@dataclass
class Write:
    """A write the server answered: who, what, and the object before and after it."""

    at: float  # trio time
    user: str
    method: str
    path: str
    resource: str  # with subresource: "pods/status"
    namespace: str
    name: str
    status: int
    body: Any
    before: dict[str, Any] | None
    after: dict[str, Any] | None

    @property
    def changed(self) -> bool:
        return self.before != self.after


@dataclass
class _Connection:
    """What KubeApi reads of a connection: no TLS peer, the identity it authenticated."""

    peer_cert: bytes | None = None
    identity: Any = None


@dataclass
class SimApiServer:
    node_name: str
    bookmark_interval: float = 5.0
    history_window: int = 1000
    writes: list[Write] = field(default_factory=list)
    on_write: Callable[[Write], None] | None = None
    lose_answers: int = 0  # answers still to lose: the server acts, the client gets a reset

    def __post_init__(self) -> None:
        self.store = Store(history_window=self.history_window)
        self.faults = Faults()
        settings = Settings(history_window=self.history_window, bookmark_interval=self.bookmark_interval)
        self.api = KubeApi(self.store, self.faults, _certificate_authority(), settings)
        self.api.tokens[NODE_TOKEN] = Identity.node(self.node_name)
        self.api.tokens[ADMIN_TOKEN] = Identity.admin()
        self._streams: list[_WatchBody] = []

    # -- the kubelet's side ------------------------------------------------------------

    def credentials(self) -> Credentials:
        return Credentials(
            server=SERVER, ssl_context=ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT), kubeconfig="/sim/kubeconfig",
            context="sim", cluster="sim", user=f"system:node:{self.node_name}", ca_source="none (simulated)",
            token=NODE_TOKEN,
        )

    def transport(self) -> SimTransport:
        return SimTransport(self)

    # -- faults --------------------------------------------------------------------------

    def fail(self, status: int, *, count: int | None = None, duration: float | None = None,
             verbs: list[str] | None = None, resources: list[str] | None = None) -> None:
        self.faults.add({"kind": "fail", "status": status, "count": count, "duration": duration,
                         "verbs": verbs, "resources": resources})

    def latency(self, seconds: float, duration: float) -> None:
        self.faults.add({"kind": "latency", "seconds": seconds, "duration": duration})

    def hang(self, duration: float) -> None:
        """Requests held unanswered for `duration`, and open watches stalled."""
        self.faults.add({"kind": "hang", "duration": duration})

    def reset(self, duration: float) -> int:
        """Open connections reset now, and every request for `duration`; the number cut."""
        self.faults.add({"kind": "reset", "duration": duration})
        return self.cut_watches()

    def cut_watches(self) -> int:
        open_streams = [s for s in self._streams if not s.closed]
        for stream in open_streams:
            stream.abort()
        return len(open_streams)

    def expire_watches(self) -> int:
        """Compact the history: open watches end with 410 Gone, so do resumes from old versions."""
        return self.store.expire()

    # -- the test's own requests (an administrator, through the same handler) -------------

    async def admin(self, method: str, path: str, body: Any = None, *, params: dict[str, str] | None = None,
                    content_type: str = "application/json") -> tuple[int, Any]:
        request = _request(method, path, params or {}, body, content_type, ADMIN_TOKEN)
        response = await self._handle(request)
        assert response.stream is None, "admin() does not watch"
        return response.status, json.loads(response.body) if response.body else None

    def pods(self) -> list[dict[str, Any]]:
        """The stored pods themselves, not copies: read them, never change them."""
        return list(self.store._objects.get("pods", {}).values())

    def open_watches(self) -> int:
        return sum(1 for s in self._streams if not s.closed)

    # -- the handler ---------------------------------------------------------------------

    async def _handle(self, request: Request):
        write = request.method in _WRITE_METHODS
        key = _object_key(request.path) if write else None
        before = self._current(key)
        response = await self.api.handle(request)
        if write and not response.reset and response.status < 300:
            identity = request.connection.identity
            self._record(request, key, before, response.status, identity.user if identity else "")
        return response

    def _current(self, key: tuple[str, str, str] | None) -> dict[str, Any] | None:
        if key is None:
            return None
        resource, namespace, name = key
        return self.store.get(resource, namespace, name) if name else None

    def _record(self, request: Request, key, before, status: int, user: str) -> None:
        resource, namespace, name = key or ("", "", "")
        body = json.loads(request.body) if request.body.strip() else None
        if request.method == "POST" and isinstance(body, dict):
            name = (body.get("metadata") or {}).get("name") or name
        after = self.store.get(resource, namespace, name) if resource and name else None
        subresource = _subresource(request.path)
        write = Write(trio.current_time(), user, request.method, request.path,
                      resource + (f"/{subresource}" if subresource else ""), namespace, name, status, body,
                      before, after)
        self.writes.append(write)
        if self.on_write is not None:
            self.on_write(write)


class SimTransport(httpx.AsyncBaseTransport):
    """One daemon's connection pool to the simulated server."""

    def __init__(self, server: SimApiServer) -> None:
        self.server = server

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        body = await request.aread()
        url = request.url
        query = url.query.decode("ascii")
        server_request = Request(
            method=request.method, target=url.raw_path.decode("ascii"), path=url.path, query_string=query,
            query=parse_qs(query, keep_blank_values=True),
            headers={k.lower(): v for k, v in request.headers.items()}, body=body, connection=_Connection(),
            raw_headers=list(request.headers.items()),
        )
        await trio.lowlevel.checkpoint()
        response = await self.server._handle(server_request)
        if response.reset:
            raise httpx.ReadError("[Errno 104] Connection reset by peer (simulated)", request=request)
        if self.server.lose_answers > 0 and request.method in _WRITE_METHODS:
            self.server.lose_answers -= 1
            raise httpx.ReadError("[Errno 104] Connection reset by peer after the request was sent (simulated)",
                                  request=request)
        headers = list(response.headers)
        if response.stream is None:
            return httpx.Response(response.status, headers=headers, content=response.body, request=request)
        timeout = (request.extensions.get("timeout") or {}).get("read")
        stream = _WatchBody(response.stream, request, timeout)
        self.server._streams = [s for s in self.server._streams if not s.closed] + [stream]
        return httpx.Response(response.status, headers=headers, stream=stream, request=request)


class _WatchBody(httpx.AsyncByteStream):
    """A streamed answer (a watch): chunks from KubeApi's generator, with the client's read
    timeout on virtual time, cut by a reset as a TCP RST would."""

    def __init__(self, chunks, request: httpx.Request, read_timeout: float | None) -> None:
        self._chunks = chunks
        self._request = request
        self._read_timeout = read_timeout
        self._scope: trio.CancelScope | None = None
        self.aborted = False
        self.closed = False

    def abort(self) -> None:
        self.aborted = True
        if self._scope is not None:
            self._scope.cancel()

    def __aiter__(self) -> _WatchBody:
        return self

    async def __anext__(self) -> bytes:
        if self.aborted:
            await self.aclose()
            raise httpx.ReadError("[Errno 104] Connection reset by peer (simulated)", request=self._request)
        if self.closed:
            raise StopAsyncIteration
        chunk = None
        with trio.CancelScope() as scope:
            self._scope = scope
            if self._read_timeout is not None:
                scope.deadline = trio.current_time() + self._read_timeout
            try:
                chunk = await self._chunks.__anext__()
            except StopAsyncIteration:
                self.closed = True
                raise
        self._scope = None
        if scope.cancelled_caught:
            await self.aclose()
            if self.aborted:
                raise httpx.ReadError("[Errno 104] Connection reset by peer (simulated)", request=self._request)
            raise httpx.ReadTimeout("timed out reading the watch (simulated)", request=self._request)
        return chunk

    async def aclose(self) -> None:
        if self.closed:
            return
        self.closed = True
        with trio.CancelScope(shield=True):
            await self._chunks.aclose()


def _request(method: str, path: str, params: dict[str, str], body: Any, content_type: str, token: str) -> Request:
    query = "&".join(f"{k}={v}" for k, v in params.items())
    data = json.dumps(body).encode() if body is not None else b""
    headers = {"authorization": f"Bearer {token}", "accept": "application/json"}
    if body is not None:
        headers["content-type"] = content_type
    return Request(method=method, target=path + (f"?{query}" if query else ""), path=path, query_string=query,
                   query=parse_qs(query, keep_blank_values=True), headers=headers, body=data,
                   connection=_Connection(), raw_headers=list(headers.items()))


def _object_key(path: str) -> tuple[str, str, str] | None:
    """(resource, namespace, name) of a write's path; name "" for a create."""
    parts = [p for p in path.split("/") if p]
    if parts[:2] == ["api", "v1"]:
        rest = parts[2:]
    elif parts[:1] == ["apis"] and len(parts) >= 3:
        rest = parts[3:]
    else:
        return None
    namespace = ""
    if rest[:1] == ["namespaces"] and len(rest) >= 3:
        namespace, rest = rest[1], rest[2:]
    if not rest:
        return None
    return rest[0], namespace, rest[1] if len(rest) > 1 else ""


def _subresource(path: str) -> str:
    key = _object_key(path)
    parts = [p for p in path.split("/") if p]
    if key is None or not key[2]:
        return ""
    index = parts.index(key[2], parts.index(key[0]) + 1)
    return "/".join(parts[index + 1:])
