"""The upgrade proxy: takes over a client's exec, attach or port-forward upgrade request,
hands it to the container runtime's streaming server (the URL from CRI Exec/Attach/
PortForward) and relays bytes both ways, as the Go kubelet's UpgradeAwareHandler does.

The kubelet API routes call proxy_upgrade from Response.upgrade. It never parses what
flows after the upgrade, so SPDY/3.1 and the WebSocket channel protocols pass alike.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import socket
from dataclasses import dataclass
from urllib.parse import urlsplit

import h11
import trio

log = logging.getLogger("pykubelet.upgrade_proxy")

BUFFER_SIZE = 64 * 1024
CONNECT_TIMEOUT = 10.0
RESPONSE_TIMEOUT = 30.0  # for the backend's response head
ERROR_RELAY_TIMEOUT = 10.0  # for echoing a backend's error answer, as in Go
MAX_ERROR_RESPONSE = 1 << 20
WRITE_TIMEOUT = 2.0  # for answers of our own
HALF_CLOSED_IDLE_TIMEOUT = 10.0  # silence that ends a session one way of which has ended

# Hop-by-hop headers (RFC 9110 7.6.1) stay on the client's hop; Connection and Upgrade are
# what this request is about, so they go on. Host, Content-Length and X-Forwarded-For are
# rebuilt: the backend is another host, and the request body (an upgrade has none) was
# consumed by our server.
_NOT_FORWARDED = frozenset({
    b"keep-alive", b"proxy-connection", b"proxy-authenticate", b"proxy-authorization",
    b"te", b"trailer", b"transfer-encoding", b"host", b"content-length", b"x-forwarded-for",
})
_FORWARDED_HOP_BY_HOP = frozenset({b"connection", b"upgrade"})


class StreamingUrlRefused(ValueError):
    """The runtime's streaming URL is not one this kubelet proxies to."""


@dataclass(frozen=True)
class StreamingEndpoint:
    """Where a streaming URL points: a loopback address, a port and the request target."""

    host: str
    port: int
    target: str  # path and query, as sent on the request line

    @property
    def authority(self) -> str:
        """host:port as in a Host header ("[::1]:port" for IPv6)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"


def parse_streaming_url(url: str) -> StreamingEndpoint:
    """The endpoint of a runtime's streaming URL, or StreamingUrlRefused: only plain http to
    a loopback IP literal is proxied (a host name would need a lookup, which the kubelet
    never makes; anything off this machine is not the runtime's streaming server)."""
    parts = urlsplit(url)
    if parts.scheme != "http":
        raise StreamingUrlRefused(
            f"streaming URL {url!r}: only http:// on a loopback address is proxied; set the "
            "runtime's streaming server to plain http on 127.0.0.1 (containerd: "
            "stream_server_address = \"127.0.0.1\", enable_tls_streaming = false)"
        )
    host = parts.hostname or ""
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        raise StreamingUrlRefused(
            f"streaming URL {url!r}: host {host!r} is not a loopback address; the kubelet "
            "only proxies to a streaming server on this machine (containerd: "
            "stream_server_address = \"127.0.0.1\")"
        )
    try:
        port = parts.port or 80
    except ValueError as bad_port:
        raise StreamingUrlRefused(f"streaming URL {url!r}: {bad_port}") from None
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return StreamingEndpoint(host=host, port=port, target=target)


def streaming_url_is_local(url: str) -> bool:
    """True when proxy_upgrade would proxy to `url` (http on a loopback IP literal)."""
    try:
        parse_streaming_url(url)
    except StreamingUrlRefused:
        return False
    return True


def is_upgrade_request(raw_headers: list[tuple[bytes, bytes]]) -> bool:
    """A Connection header naming "upgrade" (Go's httpstream.IsUpgradeRequest)."""
    return b"upgrade" in _connection_tokens(raw_headers)


def backend_request_headers(
    raw_headers: list[tuple[bytes, bytes]], *, authority: str, client_ip: str | None
) -> list[tuple[bytes, bytes]]:
    """The client's headers as they go to the backend: in order and case as sent, Host
    set to the backend, hop-by-hop ones dropped (also those the Connection header names)
    except Connection and Upgrade, and the client's IP appended to X-Forwarded-For."""
    dropped = _NOT_FORWARDED | (_connection_tokens(raw_headers) - _FORWARDED_HOP_BY_HOP)
    headers = [(b"Host", authority.encode("ascii"))]
    forwarded_for = []
    for name, value in raw_headers:
        lower = name.lower()
        if lower == b"x-forwarded-for":
            forwarded_for.append(value)
        elif lower not in dropped:
            headers.append((name, value))
    if client_ip is not None:
        forwarded_for.append(client_ip.encode("ascii"))
    if forwarded_for:
        headers.append((b"X-Forwarded-For", b", ".join(forwarded_for)))
    return headers


async def proxy_upgrade(
    client: trio.abc.Stream,
    *,
    method: str,
    target_url: str,
    raw_headers: list[tuple[bytes, bytes]],
    already_read: bytes,
) -> None:
    """Proxy the client's upgrade request to `target_url`, relay the backend's answer, and
    after a 101 copy bytes both ways until both are done: one side's EOF is passed on as a
    half-close where the other stream allows it (else the session ends, as in Go), and the
    way still open ends after HALF_CLOSED_IDLE_TIMEOUT of silence.

    Failures are answered to the client (400 not an upgrade, 500 URL refused, 502 backend
    unreachable or not answering the upgrade) and never raised; a backend's own error
    answer (>= 400) is relayed as is. The caller closes `client` afterwards."""
    if not is_upgrade_request(raw_headers):
        await _answer(client, 400, "Bad Request", "Upgrade request required\n")
        return
    try:
        endpoint = parse_streaming_url(target_url)
    except StreamingUrlRefused as refused:
        log.error("refusing to proxy a streaming request: %s", refused)
        await _answer(client, 500, "Internal Server Error", f"{refused}\n")
        return
    try:
        with trio.fail_after(CONNECT_TIMEOUT):
            backend = await trio.open_tcp_stream(endpoint.host, endpoint.port)
    except (OSError, trio.TooSlowError) as error:
        reason = _dial_error(error)
        log.warning("streaming server %s unreachable: %s", endpoint.authority, reason)
        await _answer(
            client, 502, "Bad Gateway",
            f"error dialing backend {endpoint.authority}: {reason} (is the container "
            "runtime's streaming server running?)\n",
        )
        return
    try:
        await _proxy(client, backend, endpoint, method, raw_headers, already_read)
    finally:
        await trio.aclose_forcefully(backend)


class _BadGateway(Exception):
    pass


async def _proxy(
    client: trio.abc.Stream,
    backend: trio.SocketStream,
    endpoint: StreamingEndpoint,
    method: str,
    raw_headers: list[tuple[bytes, bytes]],
    already_read: bytes,
) -> None:
    conn = h11.Connection(h11.CLIENT)
    headers = backend_request_headers(
        raw_headers, authority=endpoint.authority, client_ip=_peer_ip(client)
    )
    head = conn.send(h11.Request(method=method, target=endpoint.target, headers=headers))
    head += conn.send(h11.EndOfMessage())
    try:
        # Bytes the client sent after its request head (early frames) follow it, in order.
        await backend.send_all(head + already_read)
        status, answer = await _read_answer(conn, backend, endpoint)
    except (_BadGateway, trio.BrokenResourceError) as error:
        reason = str(error) if isinstance(error, _BadGateway) else (
            f"the streaming server at {endpoint.authority} dropped the connection"
        )
        log.warning("streaming request to %s failed: %s", endpoint.authority, reason)
        await _answer(client, 502, "Bad Gateway", f"{reason}\n")
        return
    try:
        await client.send_all(answer)
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        return
    if status != 101:
        return  # the backend's refusal is relayed; this connection ends here
    await _splice(client, backend)


async def _read_answer(
    conn: h11.Connection, backend: trio.SocketStream, endpoint: StreamingEndpoint
) -> tuple[int, bytes]:
    """(status, bytes to relay): for 101 everything read so far (the head, and any upgraded
    bytes already behind it); for an error the whole response, up to its end."""
    received = bytearray()

    async def receive() -> bytes:
        data = await backend.receive_some(BUFFER_SIZE)
        received.extend(data)
        conn.receive_data(data)  # b"" tells h11 the backend closed
        return data

    status = None
    with trio.move_on_after(RESPONSE_TIMEOUT):
        try:
            while status is None:
                event = conn.next_event()
                if event is h11.NEED_DATA:
                    if not await receive():
                        raise _BadGateway(
                            f"the streaming server at {endpoint.authority} closed the "
                            "connection without answering"
                        )
                elif isinstance(event, h11.InformationalResponse):
                    if event.status_code == 101:
                        return 101, bytes(received)
                elif isinstance(event, h11.Response):
                    status = event.status_code
        except h11.RemoteProtocolError as error:
            raise _BadGateway(
                f"the streaming server at {endpoint.authority} sent no valid HTTP answer: {error}"
            ) from None
    if status is None:
        raise _BadGateway(
            f"the streaming server at {endpoint.authority} did not answer within "
            f"{RESPONSE_TIMEOUT:g}s"
        )
    if status < 400:
        raise _BadGateway(
            f"invalid upgrade response from the streaming server at {endpoint.authority}: "
            f"status code {status}"
        )
    # Relay the error answer whole when it comes soon; what came is relayed regardless.
    with trio.move_on_after(ERROR_RELAY_TIMEOUT):
        try:
            while len(received) <= MAX_ERROR_RESPONSE:
                event = conn.next_event()
                if event is h11.NEED_DATA:
                    await receive()
                elif isinstance(event, (h11.EndOfMessage, h11.ConnectionClosed)):
                    break
        except (h11.RemoteProtocolError, trio.BrokenResourceError):
            pass
    unread = len(conn.trailing_data[0])
    return status, bytes(received[: len(received) - unread])


async def _splice(client: trio.abc.Stream, backend: trio.abc.Stream) -> None:
    to_backend, to_client = _Direction(), _Direction()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_pump, client, backend, to_backend, to_client, nursery.cancel_scope)
        nursery.start_soon(_pump, backend, client, to_client, to_backend, nursery.cancel_scope)


class _Direction:
    """One way of a spliced connection. Once the other way has ended, this one goes on
    only while it carries data: a peer gone for good looks just like a half-close (a FIN),
    and a backend may sit silent on it (containerd waits 30s for SPDY streams)."""

    def __init__(self) -> None:
        self.scope = trio.CancelScope()
        self.lingering = False

    def other_way_ended(self) -> None:
        self.lingering = True
        self.carried_data()

    def carried_data(self) -> None:
        if self.lingering:
            self.scope.deadline = trio.current_time() + HALF_CLOSED_IDLE_TIMEOUT


async def _pump(
    source: trio.abc.Stream,
    sink: trio.abc.Stream,
    this: _Direction,
    other: _Direction,
    session: trio.CancelScope,
) -> None:
    """Copy source to sink. At source's end, half-close sink where the stream can and let
    the other way finish; where it cannot (TLS), on any error, or when the other way falls
    silent after a half-close, end the session, as the Go proxy does when either way ends."""
    with this.scope:
        try:
            while data := await source.receive_some(BUFFER_SIZE):
                await sink.send_all(data)
                this.carried_data()
            if isinstance(sink, trio.abc.HalfCloseableStream):
                await sink.send_eof()
                other.other_way_ended()
                return
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
    session.cancel()


async def _answer(client: trio.abc.Stream, status: int, reason: str, text: str) -> None:
    body = text.encode()
    head = (
        f"HTTP/1.1 {status} {reason}\r\n"
        "Content-Type: text/plain; charset=utf-8\r\n"
        "X-Content-Type-Options: nosniff\r\n"
        f"Content-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    ).encode()
    with trio.move_on_after(WRITE_TIMEOUT):
        try:
            await client.send_all(head + body)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass


def _connection_tokens(raw_headers: list[tuple[bytes, bytes]]) -> set[bytes]:
    return {
        token.strip().lower()
        for name, value in raw_headers
        if name.lower() == b"connection"
        for token in value.split(b",")
    }


def _peer_ip(stream: trio.abc.Stream) -> str | None:
    # The client's IP for X-Forwarded-For; TLS streams wrap the socket stream.
    while isinstance(stream, trio.SSLStream):
        stream = stream.transport_stream
    if not isinstance(stream, trio.SocketStream):
        return None
    if stream.socket.family not in (socket.AF_INET, socket.AF_INET6):
        return None
    try:
        return stream.socket.getpeername()[0]
    except OSError:
        return None


def _dial_error(error: BaseException) -> str:
    if isinstance(error, trio.TooSlowError):
        return f"no connection within {CONNECT_TIMEOUT:g}s"
    # trio.open_tcp_stream reports "all attempts to connect ... failed" with the causes.
    cause = error.__cause__ or error
    if isinstance(cause, BaseExceptionGroup):
        cause = cause.exceptions[-1]
    if isinstance(cause, OSError) and cause.errno:
        return os.strerror(cause.errno).lower()
    return str(cause)
