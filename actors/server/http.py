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
import socket
from dataclasses import dataclass, field
from typing import Awaitable, Callable
from urllib.parse import parse_qs, urlsplit

import h11
import trio

log = logging.getLogger("pykubelet.server")

MAX_BODY = 1 << 20
IDLE_TIMEOUT = 60.0
WRITE_TIMEOUT = 2.0


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
            try:
                response = await handler(request)
            except Exception as exc:  # a broken route must not take the server down
                log.exception("request failed", extra={"path": request.path})
                response = Response.text(500, f"internal error: {type(exc).__name__}: {exc}\n")
            if response.upgrade is not None:
                trailing, _ = conn.trailing_data
                await response.upgrade(stream, bytes(trailing))
                return
            if response.stream is not None:
                await _stream_response(conn, stream, response)
                if conn.our_state is h11.MUST_CLOSE or conn.their_state is h11.MUST_CLOSE:
                    return
                conn.start_next_cycle()
                continue
            # An answer already decided is delivered even if the server is being stopped
            # (crashing an actor started before the server restarts the server too).
            with trio.CancelScope(shield=True, deadline=trio.current_time() + WRITE_TIMEOUT):
                await _write_response(conn, stream, response)
            if response.after is not None:
                await response.after()
                return
            if conn.our_state is h11.MUST_CLOSE or conn.their_state is h11.MUST_CLOSE:
                return
            conn.start_next_cycle()
    except (h11.RemoteProtocolError, trio.BrokenResourceError, trio.ClosedResourceError):
        return
    finally:
        await trio.aclose_forcefully(stream)


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
            target = urlsplit(event.target.decode("latin-1"))
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
                raise h11.RemoteProtocolError("request body too large")
        elif isinstance(event, h11.EndOfMessage):
            assert request is not None
            request.body = bytes(body)
            return request


async def _write_response(conn: h11.Connection, stream: trio.abc.Stream, response: Response) -> None:
    headers = [
        ("content-type", response.content_type),
        ("content-length", str(len(response.body))),
        *response.headers.items(),
    ]
    for event in (
        h11.Response(status_code=response.status, headers=headers),
        h11.Data(data=response.body),
        h11.EndOfMessage(),
    ):
        data = conn.send(event)
        if data:
            await stream.send_all(data)


async def _stream_response(conn: h11.Connection, stream: trio.abc.Stream, response: Response) -> None:
    headers = [("content-type", response.content_type), *response.headers.items()]  # no length: chunked

    async def send(data: bytes) -> None:
        if data:
            await stream.send_all(conn.send(h11.Data(data=data)))

    await stream.send_all(conn.send(h11.Response(status_code=response.status, headers=headers)))
    assert response.stream is not None
    await response.stream(send)
    await stream.send_all(conn.send(h11.EndOfMessage()))


async def serve_listeners(listeners: list[trio.abc.Listener], handler: Handler) -> None:
    async def on_connection(stream: trio.abc.Stream) -> None:
        await serve_connection(stream, handler)

    await trio.serve_listeners(on_connection, listeners)


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
    old_umask = os.umask(0o177)  # the socket is born 0600, with no window for others
    try:
        await sock.bind(path)
    finally:
        os.umask(old_umask)
    os.chmod(path, 0o600)
    sock.listen(64)
    return trio.SocketListener(sock)
