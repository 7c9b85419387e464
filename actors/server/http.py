"""A small HTTP/1.1 server on trio streams (h11), for the healthz port, the admin socket
and the kubelet API.

Routes are plain async functions from Request to Response; this module only speaks the
protocol and owns the listeners (TCP, or a unix socket created with mode 0600). A response
is a body, a body streamed in chunks (`stream`: logs that follow), or a takeover of the
connection (`upgrade`: exec, attach and port-forward proxied to the runtime).
"""

from __future__ import annotations

import logging
import os
import shutil
import socket
import tempfile
from dataclasses import dataclass, field
from typing import Awaitable, Callable
from urllib.parse import parse_qs, urlsplit

import h11
import trio

log = logging.getLogger("pykubelet.server")

MAX_BODY = 1 << 20
IDLE_TIMEOUT = 60.0
WRITE_TIMEOUT = 2.0
# A unix socket's send buffer (Linux: wmem_default, 208 KiB) holds a quarter of /pods at
# 500 pods: the rest went out as the client read, one wake-up of the daemon each, and on a
# busy node every wake-up waits for a CPU. 2 MiB queues the whole answer at once (the
# kernel caps it at net.core.wmem_max). TCP keeps its own autotuning.
UNIX_SEND_BUFFER = 2 << 20


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: bytes = b""
    target: str = ""  # the request target as sent (path and query)
    raw_headers: list[tuple[bytes, bytes]] = field(default_factory=list)  # as sent, in order
    peer_certificate: bytes | None = None  # the TLS client certificate (DER), if one was given


Send = Callable[[bytes], Awaitable[None]]


@dataclass
class Response:
    status: int
    body: bytes = b""
    content_type: str = "text/plain; charset=utf-8"
    headers: dict[str, str] = field(default_factory=dict)
    # Run once the response is written (for actions that would end this connection).
    after: Callable[[], Awaitable[None]] | None = None
    # A body written piece by piece (chunked transfer encoding) until the producer returns;
    # `body` is then ignored. A client that goes away ends it (the send raises).
    stream: Callable[[Send], Awaitable[None]] | None = None
    # Take over the connection instead of answering: called with the client's stream and
    # the bytes it sent after the request head; the connection is closed when it returns.
    upgrade: Callable[[trio.abc.Stream, bytes], Awaitable[None]] | None = None

    @classmethod
    def text(cls, status: int, text: str) -> Response:
        return cls(status, text.encode())

    @classmethod
    def json(cls, status: int, body: bytes) -> Response:
        return cls(status, body, "application/json")


Handler = Callable[[Request], Awaitable[Response]]


class AdminSocketInUse(OSError):
    pass


async def serve_connection(
    stream: trio.abc.Stream, handler: Handler, *, peer_certificate: bytes | None = None
) -> None:
    conn = h11.Connection(h11.SERVER)
    try:
        while True:
            request = await _read_request(conn, stream)
            if request is None:
                return
            request.peer_certificate = peer_certificate
            # The answer lives in _answer's frame only: a keep-alive connection waiting for
            # its next request must not hold the last body (/pods with 110 pods: 245 kB).
            if not await _answer(conn, stream, request, handler):
                return
            conn.start_next_cycle()
    except h11.RemoteProtocolError as exc:
        await _refuse(conn, stream, exc)
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        return
    finally:
        await trio.aclose_forcefully(stream)


async def _answer(conn: h11.Connection, stream: trio.abc.Stream, request: Request, handler: Handler) -> bool:
    """Answer one request; False when the connection ends with it."""
    if request.method == "CONNECT":  # h11 would switch protocols on a 2xx: no route takes it
        response = Response.text(405, "method not allowed: CONNECT\n")
    else:
        try:
            response = await handler(request)
        except Exception as exc:  # a broken route must not take the server down
            log.exception("request failed", extra={"path": request.path})
            response = Response.text(500, f"internal error: {type(exc).__name__}: {exc}\n")
    if response.upgrade is not None:
        trailing, _ = conn.trailing_data
        await response.upgrade(stream, bytes(trailing))
        return False
    if response.stream is not None:
        await _stream_response(conn, stream, response, head=request.method == "HEAD")
    else:
        # An answer already decided is delivered even if the server is being stopped
        # (crashing an actor started before the server restarts the server too).
        with trio.CancelScope(shield=True, deadline=trio.current_time() + WRITE_TIMEOUT):
            await _write_response(conn, stream, response, head=request.method == "HEAD")
        if response.after is not None:
            await response.after()
            return False
    return conn.our_state is not h11.MUST_CLOSE and conn.their_state is not h11.MUST_CLOSE


async def _read_request(conn: h11.Connection, stream: trio.abc.Stream) -> Request | None:
    request: Request | None = None
    body = bytearray()
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            with trio.move_on_after(IDLE_TIMEOUT):
                data = await stream.receive_some(65536)
                conn.receive_data(data)
                continue
            return None  # idle connection
        if isinstance(event, h11.ConnectionClosed):
            return None
        if isinstance(event, h11.Request):
            try:
                target = urlsplit(event.target.decode("latin-1"))
            except ValueError as exc:  # "//[": an unclosed IPv6 host
                raise h11.RemoteProtocolError(f"invalid request target: {exc}", error_status_hint=400) from None
            request = Request(
                method=event.method.decode("ascii"),
                path=target.path,
                query=parse_qs(target.query, keep_blank_values=True),
                headers={k.decode("latin-1"): v.decode("latin-1") for k, v in event.headers},
                target=event.target.decode("latin-1"),
                raw_headers=list(event.headers.raw_items()),
            )
        elif isinstance(event, h11.Data):
            body += event.data
            if len(body) > MAX_BODY:
                raise h11.RemoteProtocolError("request body too large", error_status_hint=413)
        elif isinstance(event, h11.EndOfMessage):
            assert request is not None
            request.body = bytes(body)
            return request


async def _refuse(conn: h11.Connection, stream: trio.abc.Stream, exc: h11.RemoteProtocolError) -> None:
    """Answer a request h11 cannot parse with its 4xx (400, 413, 414, 431), as Go's net/http
    does, then close; nothing when a response was already begun."""
    if conn.our_state not in (h11.IDLE, h11.SEND_RESPONSE):
        return
    response = Response.text(exc.error_status_hint, f"bad request: {exc}\n")
    response.headers["connection"] = "close"
    with trio.move_on_after(WRITE_TIMEOUT):
        try:
            await _write_response(conn, stream, response)
        except (h11.LocalProtocolError, trio.BrokenResourceError, trio.ClosedResourceError):
            pass


async def _write_response(
    conn: h11.Connection, stream: trio.abc.Stream, response: Response, *, head: bool = False
) -> None:
    headers = [
        ("content-type", response.content_type),
        ("content-length", str(len(response.body))),
        *response.headers.items(),
    ]
    for event in (
        h11.Response(status_code=response.status, headers=headers),
        h11.Data(data=b"" if head else response.body),  # a HEAD answer has the length, no body
        h11.EndOfMessage(),
    ):
        data = conn.send(event)
        if data:
            await stream.send_all(data)


async def _stream_response(
    conn: h11.Connection, stream: trio.abc.Stream, response: Response, *, head: bool = False
) -> None:
    headers = [("content-type", response.content_type), *response.headers.items()]  # no length: chunked

    async def send(data: bytes) -> None:
        if data and not head:
            await stream.send_all(conn.send(h11.Data(data=data)))

    await stream.send_all(conn.send(h11.Response(status_code=response.status, headers=headers)))
    assert response.stream is not None
    await response.stream(send)
    await stream.send_all(conn.send(h11.EndOfMessage()))


async def serve_listeners(listeners: list[trio.abc.Listener], handler: Handler) -> None:
    async def on_connection(stream: trio.abc.Stream) -> None:
        queue_whole_answers(stream)
        await serve_connection(stream, handler)

    await trio.serve_listeners(on_connection, listeners)


def queue_whole_answers(stream: trio.abc.Stream) -> None:
    """A larger send buffer for a unix socket connection (UNIX_SEND_BUFFER)."""
    if isinstance(stream, trio.SocketStream) and stream.socket.family == socket.AF_UNIX:
        try:
            stream.socket.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, UNIX_SEND_BUFFER)
        except OSError:
            pass  # the default buffer still works, with more wake-ups


async def open_tcp(host: str, port: int) -> list[trio.SocketListener]:
    return await trio.open_tcp_listeners(port, host=host)


async def open_unix(path: str) -> trio.SocketListener:
    """Listen on a unix socket at `path`, mode 0600; a stale socket file is replaced, a
    live one (another daemon on the same root dir) is refused."""
    if os.path.exists(path):
        probe = trio.socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            await probe.connect(path)
        except OSError:
            os.unlink(path)  # nobody answers: left behind by a daemon that died
        else:
            raise AdminSocketInUse(
                f"admin socket {path} is in use: another pykubelet runs with this root dir; "
                "stop it or pass a different --root-dir"
            )
        finally:
            probe.close()
    sock = trio.socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    # Born in a directory only root may enter, made 0600, then moved into place: no window
    # in which another user could connect, and no process-wide umask changed meanwhile
    # (files other tasks create then would get the wrong mode).
    try:
        private = tempfile.mkdtemp(prefix=".admin-socket-", dir=os.path.dirname(path) or ".")
        try:
            born = os.path.join(private, "socket")
            await sock.bind(born)
            os.chmod(born, 0o600)
            os.rename(born, path)
        finally:
            shutil.rmtree(private, ignore_errors=True)
        sock.listen(64)
    except BaseException:
        sock.close()  # not left to the garbage collector: the error's traceback holds it
        raise
    return trio.SocketListener(sock)
