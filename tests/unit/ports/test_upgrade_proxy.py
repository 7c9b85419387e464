"""proxy_upgrade against fake streaming servers on loopback TCP: the upgrade and the
request that reaches the backend, error answers relayed, an unreachable backend, either
side going away (no task or fd left), half-close, and a large transfer both ways."""

from __future__ import annotations

import hashlib
import os
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import pytest
import trio

from pykubelet.ports import upgrade_proxy
from pykubelet.ports.upgrade_proxy import (
    StreamingUrlRefused,
    backend_request_headers,
    is_upgrade_request,
    parse_streaming_url,
    proxy_upgrade,
    streaming_url_is_local,
)
from tests.support.daemon import free_port

SPDY_HEADERS = [
    (b"Host", b"node1:10250"),
    (b"X-Stream-Protocol-Version", b"v4.channel.k8s.io"),
    (b"Connection", b"Upgrade"),
    (b"Upgrade", b"SPDY/3.1"),
    (b"Content-Length", b"0"),
]
# A socket left for the garbage collector to close is a leak, even if the fd count is right.
no_unclosed_sockets = pytest.mark.filterwarnings(
    "error::ResourceWarning", "error::pytest.PytestUnraisableExceptionWarning"
)
SWITCHING = b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n\r\n"

VIRTUAL_DEADLINE = 1000.0  # seconds on the autojump clock

BackendHandler = Callable[[trio.SocketStream], Awaitable[None]]


# -- helpers -------------------------------------------------------------------------------


@asynccontextmanager
async def backend(handler: BackendHandler) -> AsyncIterator[int]:
    """A fake streaming server on 127.0.0.1; yields its port."""

    async def serve(stream: trio.SocketStream) -> None:
        try:
            await handler(stream)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        finally:
            await trio.aclose_forcefully(stream)

    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(trio.serve_tcp, serve, 0)
        port = next(
            listener.socket.getsockname()[1] for listener in listeners
            if listener.socket.family == socket.AF_INET
        )
        yield port
        nursery.cancel_scope.cancel()


async def read_head(stream: trio.abc.Stream) -> tuple[bytes, bytes]:
    """(head up to the blank line, bytes after it)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = await stream.receive_some(65536)
        if not chunk:
            raise AssertionError(f"closed before a whole head: {data!r}")
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    return head + b"\r\n\r\n", rest


async def read_exactly(stream: trio.abc.Stream, size: int) -> bytes:
    data = bytearray()
    while len(data) < size:
        chunk = await stream.receive_some(size - len(data))
        if not chunk:
            raise AssertionError(f"EOF after {len(data)} of {size} bytes")
        data += chunk
    return bytes(data)


async def read_to_end(stream: trio.abc.Stream) -> bytes:
    data = bytearray()
    while chunk := await stream.receive_some(65536):
        data += chunk
    return bytes(data)


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


class Proxied:
    """The client's end of a connection whose server end runs proxy_upgrade."""

    def __init__(self) -> None:
        self.client: trio.SocketStream
        self.finished = trio.Event()


@asynccontextmanager
async def proxied(
    url: str,
    *,
    headers: list[tuple[bytes, bytes]] = SPDY_HEADERS,
    already_read: bytes = b"",
    method: str = "POST",
    wrap: Callable[[trio.SocketStream], trio.abc.Stream] = lambda stream: stream,
) -> AsyncIterator[Proxied]:
    """Run proxy_upgrade on one end of a socket pair, closing it afterwards as the kubelet's
    HTTP server does; yield the other end as the client."""
    session = Proxied()
    server_sock, client_sock = trio.socket.socketpair()
    session.client = trio.SocketStream(client_sock)
    server_end = wrap(trio.SocketStream(server_sock))

    async def run() -> None:
        try:
            await proxy_upgrade(
                server_end, method=method, target_url=url, raw_headers=headers,
                already_read=already_read,
            )
        finally:
            await trio.aclose_forcefully(server_end)
            session.finished.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(run)
        try:
            yield session
        finally:
            await trio.aclose_forcefully(session.client)


class NotHalfCloseable(trio.abc.Stream):
    """A client stream that cannot send EOF alone, as a TLS stream."""

    def __init__(self, inner: trio.SocketStream) -> None:
        self.inner = inner

    async def send_all(self, data) -> None:
        await self.inner.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self.inner.wait_send_all_might_not_block()

    async def receive_some(self, max_bytes=None) -> bytes:
        return await self.inner.receive_some(max_bytes)

    async def aclose(self) -> None:
        await self.inner.aclose()


# -- pure parts ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "local"),
    [
        ("http://127.0.0.1:35507/exec/w1-EzoKg", True),
        ("http://127.1.2.3:80/attach/x", True),
        ("http://[::1]:8080/portforward/x", True),
        ("http://127.0.0.1/exec/x", True),
        ("https://127.0.0.1:1/exec/x", False),  # TLS streaming is not proxied
        ("http://localhost:1/exec/x", False),  # a name would need a lookup
        ("http://192.0.2.10:1/exec/x", False),
        ("http://0.0.0.0:1/exec/x", False),
        ("ws://127.0.0.1:1/exec/x", False),
        ("/exec/x", False),
        ("http://127.0.0.1:99999/exec/x", False),
    ],
)
def test_streaming_url_is_local_only_for_http_on_a_loopback_ip(url: str, local: bool) -> None:
    assert streaming_url_is_local(url) is local


def test_refused_url_names_the_url_and_the_fix() -> None:
    with pytest.raises(StreamingUrlRefused) as refused:
        parse_streaming_url("http://10.1.2.3:4000/exec/abc")
    message = str(refused.value)
    assert "http://10.1.2.3:4000/exec/abc" in message and "not a loopback address" in message
    assert "stream_server_address" in message


def test_endpoint_keeps_path_and_query_and_brackets_ipv6() -> None:
    endpoint = parse_streaming_url("http://[::1]:9000/exec/tok?x=1")
    assert (endpoint.host, endpoint.port, endpoint.target) == ("::1", 9000, "/exec/tok?x=1")
    assert endpoint.authority == "[::1]:9000"
    assert parse_streaming_url("http://127.0.0.1:9/exec/tok").authority == "127.0.0.1:9"


@pytest.mark.parametrize(
    ("headers", "upgrade"),
    [
        ([(b"Connection", b"Upgrade"), (b"Upgrade", b"websocket")], True),
        ([(b"connection", b"keep-alive, upgrade")], True),
        ([(b"Connection", b"keep-alive")], False),
        ([(b"Upgrade", b"SPDY/3.1")], False),  # Go asks for the Connection token
        ([], False),
    ],
)
def test_is_upgrade_request_reads_the_connection_header(headers, upgrade) -> None:
    assert is_upgrade_request(headers) is upgrade


def test_backend_headers_set_host_drop_hop_by_hop_and_append_forwarded_for() -> None:
    sent = [
        (b"Host", b"node1:10250"),
        (b"Connection", b"Upgrade, X-Secret-Hop"),
        (b"Upgrade", b"websocket"),
        (b"Keep-Alive", b"timeout=5"),
        (b"Proxy-Authorization", b"Basic eA=="),
        (b"TE", b"trailers"),
        (b"Transfer-Encoding", b"chunked"),
        (b"Content-Length", b"0"),
        (b"X-Secret-Hop", b"1"),
        (b"X-Forwarded-For", b"10.0.0.1"),
        (b"Sec-WebSocket-Protocol", b"v4.channel.k8s.io"),
        (b"Sec-WebSocket-Key", b"dGhlIHNhbXBsZSBub25jZQ=="),
    ]
    assert backend_request_headers(sent, authority="127.0.0.1:4000", client_ip="127.0.0.9") == [
        (b"Host", b"127.0.0.1:4000"),
        (b"Connection", b"Upgrade, X-Secret-Hop"),
        (b"Upgrade", b"websocket"),
        (b"Sec-WebSocket-Protocol", b"v4.channel.k8s.io"),
        (b"Sec-WebSocket-Key", b"dGhlIHNhbXBsZSBub25jZQ=="),
        (b"X-Forwarded-For", b"10.0.0.1, 127.0.0.9"),
    ]
    assert (b"X-Forwarded-For", b"127.0.0.9") in backend_request_headers(
        [(b"Connection", b"Upgrade")], authority="127.0.0.1:1", client_ip="127.0.0.9"
    )
    assert not any(
        name == b"X-Forwarded-For"
        for name, _ in backend_request_headers([], authority="127.0.0.1:1", client_ip=None)
    )


# -- against fake streaming servers --------------------------------------------------------


async def test_upgrade_is_relayed_and_bytes_flow_both_ways() -> None:
    seen: dict[str, bytes] = {}

    async def echo_after_101(stream: trio.SocketStream) -> None:
        head, rest = await read_head(stream)
        seen["head"], seen["early"] = head, rest
        # Upgraded bytes right behind the 101, in the same segment, must reach the client.
        await stream.send_all(SWITCHING + b"\x80\x03\x00\x04hello")
        while data := await stream.receive_some(65536):
            await stream.send_all(data)

    async with backend(echo_after_101) as port:
        async with proxied(f"http://127.0.0.1:{port}/exec/tok3n?a=1", already_read=b"EARLY") as session:
            head, rest = await read_head(session.client)
            assert head == SWITCHING
            rest += await read_exactly(session.client, len(b"\x80\x03\x00\x04hello") - len(rest))
            assert rest == b"\x80\x03\x00\x04hello"
            await session.client.send_all(b"ping" * 1000)
            assert await read_exactly(session.client, 4000) == b"ping" * 1000

    lines = seen["head"].decode().split("\r\n")
    assert lines[0] == "POST /exec/tok3n?a=1 HTTP/1.1"
    assert lines[1] == f"Host: 127.0.0.1:{port}"
    assert lines[2:5] == [
        "X-Stream-Protocol-Version: v4.channel.k8s.io", "Connection: Upgrade", "Upgrade: SPDY/3.1",
    ]
    assert not any(line.lower().startswith("content-length") for line in lines)
    # What the client sent behind its request head went on first, before anything else.
    assert seen["early"].startswith(b"EARLY")


@no_unclosed_sockets
@pytest.mark.parametrize(
    "answer",
    [
        # Go's http.NotFound, on a connection the backend keeps open (keep-alive).
        b"HTTP/1.1 404 Not Found\r\nContent-Type: text/plain; charset=utf-8\r\n"
        b"X-Content-Type-Options: nosniff\r\nContent-Length: 19\r\n\r\n404 page not found\n",
        # A chunked error body.
        b"HTTP/1.1 500 Internal Server Error\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"5\r\nboom\n\r\n0\r\n\r\n",
    ],
)
async def test_error_answer_is_relayed_as_is_and_the_connection_ends(answer: bytes) -> None:
    async def refuse(stream: trio.SocketStream) -> None:
        await read_head(stream)
        await stream.send_all(answer + b"HTTP/1.1 junk after the answer")
        await trio.sleep_forever()  # keeps its end open

    async with backend(refuse) as port:
        with trio.fail_after(5):
            async with proxied(f"http://127.0.0.1:{port}/exec/used") as session:
                assert await read_to_end(session.client) == answer
                await session.finished.wait()


async def test_error_answer_without_length_is_relayed_until_the_backend_closes() -> None:
    # x/net/websocket's answer to an unsupported subprotocol (containerd 1.6, v5.channel).
    async def forbid(stream: trio.SocketStream) -> None:
        await read_head(stream)
        await stream.send_all(b"HTTP/1.1 403 Forbidden\r\n\r\n")

    async with backend(forbid) as port:
        with trio.fail_after(5):
            async with proxied(f"http://127.0.0.1:{port}/exec/x") as session:
                assert await read_to_end(session.client) == b"HTTP/1.1 403 Forbidden\r\n\r\n"


@no_unclosed_sockets
async def test_unreachable_backend_is_answered_502_naming_the_endpoint() -> None:
    port = free_port()
    async with proxied(f"http://127.0.0.1:{port}/exec/x") as session:
        answer = await read_to_end(session.client)
        await session.finished.wait()
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 502 Bad Gateway\r\n")
    assert f"error dialing backend 127.0.0.1:{port}: connection refused".encode() in body
    assert f"Content-Length: {len(body)}".encode() in head


async def test_non_loopback_url_is_refused_without_dialing() -> None:
    async with proxied("http://192.0.2.10:4000/exec/x") as session:
        answer = await read_to_end(session.client)
    assert answer.startswith(b"HTTP/1.1 500 Internal Server Error\r\n")
    assert b"192.0.2.10" in answer and b"not a loopback address" in answer


async def test_request_that_is_not_an_upgrade_is_answered_400() -> None:
    async with proxied("http://127.0.0.1:1/exec/x", headers=[(b"Host", b"n")]) as session:
        answer = await read_to_end(session.client)
    assert answer.startswith(b"HTTP/1.1 400 Bad Request\r\n")
    assert answer.endswith(b"Upgrade request required\n")


@pytest.mark.parametrize(
    ("answer", "says"),
    [
        (b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", b"invalid upgrade response"),
        (b"SSH-2.0-OpenSSH_9.2\r\n\r\n", b"no valid HTTP answer"),
        (b"", b"closed the connection without answering"),
    ],
)
async def test_backend_that_does_not_upgrade_is_answered_502(answer: bytes, says: bytes) -> None:
    async def misbehave(stream: trio.SocketStream) -> None:
        await read_head(stream)
        await stream.send_all(answer)

    async with backend(misbehave) as port:
        async with proxied(f"http://127.0.0.1:{port}/exec/x") as session:
            reply = await read_to_end(session.client)
    assert reply.startswith(b"HTTP/1.1 502 Bad Gateway\r\n")
    assert says in reply and f"127.0.0.1:{port}".encode() in reply


async def test_backend_silent_past_the_response_timeout_is_answered_502(autojump_clock) -> None:
    async def silent(stream: trio.SocketStream) -> None:
        await read_head(stream)
        await trio.sleep_forever()

    with trio.fail_after(VIRTUAL_DEADLINE):  # fail, not hang, on a regression
        async with backend(silent) as port:
            async with proxied(f"http://127.0.0.1:{port}/exec/x") as session:
                started = trio.current_time()
                reply = await read_to_end(session.client)
                assert trio.current_time() - started == pytest.approx(upgrade_proxy.RESPONSE_TIMEOUT)
        assert reply.startswith(b"HTTP/1.1 502 Bad Gateway\r\n")
        assert b"did not answer within 30s" in reply


@no_unclosed_sockets
async def test_client_going_away_mid_stream_closes_the_backend_and_leaks_nothing() -> None:
    backend_done = trio.Event()

    async def stream_forever(stream: trio.SocketStream) -> None:
        try:
            await read_head(stream)
            await stream.send_all(SWITCHING)
            while True:  # an endless output, as `yes` in a container
                await stream.send_all(b"y\n" * 32768)
        finally:
            backend_done.set()

    async with backend(stream_forever) as port:
        baseline = open_fds()
        with trio.fail_after(5):
            async with proxied(f"http://127.0.0.1:{port}/exec/x") as session:
                await read_head(session.client)
                await read_exactly(session.client, 200_000)
                await session.client.aclose()  # the client disconnects mid-stream
                await session.finished.wait()
                await backend_done.wait()
        # The backend connection (both ends) and the socket pair are all closed.
        assert open_fds() == baseline


@no_unclosed_sockets
async def test_backend_going_away_mid_stream_ends_the_session() -> None:
    async def say_and_go(stream: trio.SocketStream) -> None:
        await read_head(stream)
        await stream.send_all(SWITCHING + b"last words")

    async with backend(say_and_go) as port:
        baseline = open_fds()
        with trio.fail_after(5):
            async with proxied(f"http://127.0.0.1:{port}/exec/x") as session:
                _, rest = await read_head(session.client)
                # The client sees the output, then EOF; it closes, and the proxy ends.
                assert rest + await read_to_end(session.client) == b"last words"
                await session.client.aclose()
                await session.finished.wait()
        assert open_fds() == baseline


async def test_client_eof_half_closes_the_backend_which_may_still_answer() -> None:
    async def sum_then_answer(stream: trio.SocketStream) -> None:
        await read_head(stream)
        await stream.send_all(SWITCHING)
        total = len(await read_to_end(stream))  # until the client's EOF comes through
        await stream.send_all(f"got {total} bytes".encode())

    async with backend(sum_then_answer) as port:
        with trio.fail_after(5):
            async with proxied(f"http://127.0.0.1:{port}/exec/x") as session:
                await read_head(session.client)
                await session.client.send_all(b"x" * 100_000)
                await session.client.send_eof()
                assert await read_to_end(session.client) == b"got 100000 bytes"
                await session.finished.wait()


async def test_backend_eof_ends_the_session_when_the_client_cannot_half_close() -> None:
    async def say_and_go(stream: trio.SocketStream) -> None:
        await read_head(stream)
        await stream.send_all(SWITCHING + b"bye")

    async with backend(say_and_go) as port:
        with trio.fail_after(5):
            async with proxied(f"http://127.0.0.1:{port}/exec/x", wrap=NotHalfCloseable) as session:
                _, rest = await read_head(session.client)
                # The client keeps its end open; the proxy ends regardless, as Go's does.
                await session.finished.wait()
                assert rest + await read_to_end(session.client) == b"bye"


@no_unclosed_sockets
async def test_cancelling_the_proxy_closes_the_backend() -> None:
    backend_saw_end = trio.Event()

    async def wait_for_end(stream: trio.SocketStream) -> None:
        await read_head(stream)
        await stream.send_all(SWITCHING)
        await read_to_end(stream)
        backend_saw_end.set()

    async with backend(wait_for_end) as port:
        with trio.fail_after(5):
            with trio.CancelScope() as scope:
                async with proxied(f"http://127.0.0.1:{port}/exec/x") as session:
                    await read_head(session.client)
                    scope.cancel()  # the kubelet's server shutting down
            await backend_saw_end.wait()


async def test_twenty_mib_cross_intact_in_both_directions_at_once() -> None:
    size = 20 * 1024 * 1024
    upstream, downstream = os.urandom(size), os.urandom(size)
    received_by_backend: list[bytes] = []

    async def exchange(stream: trio.SocketStream) -> None:
        await read_head(stream)
        await stream.send_all(SWITCHING)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(stream.send_all, downstream)
            received_by_backend.append(await read_exactly(stream, size))

    async with backend(exchange) as port:
        with trio.fail_after(30):
            async with proxied(f"http://127.0.0.1:{port}/exec/x") as session:
                _, rest = await read_head(session.client)
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(session.client.send_all, upstream)
                    got = rest + await read_exactly(session.client, size - len(rest))
    assert hashlib.sha256(got).digest() == hashlib.sha256(downstream).digest()
    assert hashlib.sha256(received_by_backend[0]).digest() == hashlib.sha256(upstream).digest()


async def test_backend_silent_after_the_client_eof_ends_the_session_when_idle(autojump_clock) -> None:
    # A client gone for good sends the same FIN as one that only half-closed; a backend
    # that then says nothing (containerd waits 30s for SPDY streams) must not hold the
    # session open.
    async def ignore_eof(stream: trio.SocketStream) -> None:
        await read_head(stream)
        await stream.send_all(SWITCHING)
        await read_to_end(stream)
        await trio.sleep_forever()

    with trio.fail_after(VIRTUAL_DEADLINE):  # fail, not hang, on a regression
        async with backend(ignore_eof) as port:
            async with proxied(f"http://127.0.0.1:{port}/exec/x") as session:
                await read_head(session.client)
                await session.client.send_eof()
                left = trio.current_time()
                await session.finished.wait()
                assert trio.current_time() - left == pytest.approx(upgrade_proxy.HALF_CLOSED_IDLE_TIMEOUT)


async def test_backend_still_talking_after_the_client_eof_is_not_cut(autojump_clock) -> None:
    gap = upgrade_proxy.HALF_CLOSED_IDLE_TIMEOUT / 2

    async def talk_slowly(stream: trio.SocketStream) -> None:
        await read_head(stream)
        await stream.send_all(SWITCHING)
        await read_to_end(stream)
        for i in range(6):  # for three idle timeouts in all, never silent for one
            await trio.sleep(gap)
            await stream.send_all(b"%d;" % i)

    with trio.fail_after(VIRTUAL_DEADLINE):  # fail, not hang, on a regression
        async with backend(talk_slowly) as port:
            async with proxied(f"http://127.0.0.1:{port}/exec/x") as session:
                _, rest = await read_head(session.client)
                await session.client.send_eof()
                assert rest + await read_to_end(session.client) == b"0;1;2;3;4;5;"
                await session.finished.wait()
