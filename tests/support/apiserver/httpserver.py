"""A small HTTP/1.1 server on trio and h11, with optional TLS that asks for a client
certificate. It keeps track of its open connections so that a fault can reset them (close
with SO_LINGER 0: the peer sees a TCP RST), streams chunked responses (watches) while
noticing a client that goes away, and hands each request to one async handler."""

from __future__ import annotations

import itertools
import socket
import ssl
import struct
import traceback
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlsplit

import h11
import trio

MAX_BODY = 3 * 1024 * 1024  # kube-apiserver's request body limit
_PEER_ERRORS = (trio.BrokenResourceError, trio.ClosedResourceError, trio.TooSlowError, h11.ProtocolError,
                ssl.SSLError, OSError)


@dataclass(eq=False)
class Connection:
    id: int
    transport: trio.SocketStream
    scope: trio.CancelScope | None = None
    peer_cert: bytes | None = None
    identity: Any = None  # set by the handler once the request is authenticated
    aborted: bool = False

    def abort(self) -> None:
        """Close abruptly: the peer gets a TCP RST, not a FIN or a TLS close_notify."""
        if self.aborted:
            return
        self.aborted = True
        try:
            self.transport.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass
        if self.scope is not None:
            self.scope.cancel()


@dataclass
class Request:
    method: str
    target: str
    path: str
    query_string: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: bytes
    connection: Connection
    raw_headers: list[tuple[str, str]] = field(default_factory=list)  # in order, repeats kept

    def param(self, name: str, default: str | None = None) -> str | None:
        values = self.query.get(name)
        return values[-1] if values else default


@dataclass
class Response:
    status: int
    body: bytes = b""
    headers: list[tuple[str, str]] = field(default_factory=list)
    stream: AsyncIterator[bytes] | None = None  # sent chunked when set
    reset: bool = False  # abort the connection instead of answering
    # Take the connection over instead of answering: called with the client's stream and the
    # bytes it already sent past the request (a proxied upgrade); the connection ends after.
    takeover: Callable[[trio.abc.Stream, bytes], Awaitable[None]] | None = None


Handler = Callable[[Request], Awaitable[Response]]


class HttpServer:
    def __init__(self, handler: Handler, ssl_context: ssl.SSLContext | None = None) -> None:
        self.handler = handler
        self.ssl_context = ssl_context
        self.connections: set[Connection] = set()
        self._ids = itertools.count(1)

    async def serve(self, listener: trio.SocketListener) -> None:
        await trio.serve_listeners(self._handle, [listener])

    def abort_connections(self, predicate: Callable[[Connection], bool]) -> int:
        victims = [c for c in self.connections if predicate(c)]
        for conn in victims:
            conn.abort()
        return len(victims)

    async def _handle(self, transport: trio.SocketStream) -> None:
        conn = Connection(next(self._ids), transport)
        self.connections.add(conn)
        stream: trio.abc.Stream = transport
        try:
            with trio.CancelScope() as scope:
                conn.scope = scope
                if self.ssl_context is not None:
                    tls = trio.SSLStream(transport, self.ssl_context, server_side=True)
                    with trio.fail_after(10):
                        await tls.do_handshake()
                    conn.peer_cert = tls.getpeercert(binary_form=True)
                    stream = tls
                await self._serve_http(conn, stream)
        except _PEER_ERRORS:
            pass
        except BaseExceptionGroup as group:
            _, rest = group.split(_PEER_ERRORS)
            cancelled, unexpected = rest.split(trio.Cancelled) if rest is not None else (None, None)
            if unexpected is not None:
                traceback.print_exception(unexpected)
            if cancelled is not None:
                raise cancelled  # the server is shutting down: let the cancellation through
        except Exception:  # one connection's bug must not stop the server
            traceback.print_exc()
        finally:
            self.connections.discard(conn)
            if conn.aborted:
                await transport.aclose()
            else:
                with trio.move_on_after(1) as cleanup:
                    cleanup.shield = True
                    try:
                        await stream.aclose()
                    except (trio.BrokenResourceError, trio.ClosedResourceError, ssl.SSLError, OSError):
                        pass
                await transport.aclose()

    async def _next_event(self, h: h11.Connection, stream: trio.abc.Stream) -> Any:
        while True:
            event = h.next_event()
            if event is not h11.NEED_DATA:
                return event
            data = await stream.receive_some(65536)
            h.receive_data(data)

    async def _serve_http(self, conn: Connection, stream: trio.abc.Stream) -> None:
        h = h11.Connection(h11.SERVER, max_incomplete_event_size=64 * 1024)
        while True:
            event = await self._next_event(h, stream)
            if not isinstance(event, h11.Request):
                return
            body = bytearray()
            while True:
                part = await self._next_event(h, stream)
                if isinstance(part, h11.Data):
                    body += part.data
                    if len(body) > MAX_BODY:
                        await self._send_simple(h, stream, 413, b'{"kind":"Status","code":413}')
                        return
                elif isinstance(part, h11.EndOfMessage):
                    break
                else:
                    return
            target = event.target.decode("latin-1")
            split = urlsplit(target)
            request = Request(
                method=event.method.decode("ascii").upper(),
                target=target,
                path=split.path,
                query_string=split.query,
                query=parse_qs(split.query, keep_blank_values=True),
                headers={k.decode("latin-1").lower(): v.decode("latin-1") for k, v in event.headers},
                body=bytes(body),
                connection=conn,
                raw_headers=[(k.decode("latin-1"), v.decode("latin-1")) for k, v in event.headers],
            )
            response = await self.handler(request)
            if response.reset:
                conn.abort()
                return
            if response.takeover is not None:
                await response.takeover(stream, h.trailing_data[0])
                return
            await self._send(h, stream, response)
            if h.our_state is h11.MUST_CLOSE or h.their_state is h11.MUST_CLOSE:
                return
            if h.their_state is h11.DONE and h.our_state is h11.DONE:
                h.start_next_cycle()
            else:
                return

    async def _send_simple(self, h: h11.Connection, stream: trio.abc.Stream, status: int, body: bytes) -> None:
        await self._send(h, stream, Response(status, body, [("Content-Type", "application/json")]))

    async def _send(self, h: h11.Connection, stream: trio.abc.Stream, response: Response) -> None:
        headers = list(response.headers)
        if response.stream is None:
            headers.append(("Content-Length", str(len(response.body))))
        else:
            # Cancelling the read that watches for the peer leaves a TLS stream unusable, so a
            # streamed response (a watch) ends its connection; the header tells the client.
            headers.append(("Transfer-Encoding", "chunked"))
            headers.append(("Connection", "close"))
        await stream.send_all(h.send(h11.Response(status_code=response.status, headers=headers)))
        if response.stream is None:
            if response.body:
                await stream.send_all(h.send(h11.Data(data=response.body)))
            await stream.send_all(h.send(h11.EndOfMessage()))
            return
        client_gone = False

        async def pump(cancel: trio.CancelScope) -> None:
            nonlocal client_gone
            assert response.stream is not None
            try:
                async for chunk in response.stream:
                    if chunk:
                        await stream.send_all(h.send(h11.Data(data=chunk)))
                await stream.send_all(h.send(h11.EndOfMessage()))
            except _PEER_ERRORS:
                client_gone = True
            cancel.cancel()

        async def watch_peer(cancel: trio.CancelScope) -> None:
            nonlocal client_gone
            try:
                while data := await stream.receive_some(65536):
                    h.receive_data(data)
            except _PEER_ERRORS:
                pass
            client_gone = True
            cancel.cancel()

        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(pump, nursery.cancel_scope)
                nursery.start_soon(watch_peer, nursery.cancel_scope)
        finally:
            aclose = getattr(response.stream, "aclose", None)
            if aclose is not None:
                with trio.CancelScope(shield=True):
                    await aclose()
        if client_gone:
            raise trio.ClosedResourceError("client closed the connection during a streamed response")
