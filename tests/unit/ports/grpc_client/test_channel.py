"""The gRPC client against a scripted HTTP/2 server in the test (raw frames on a unix
socket): what real servers may send that containerd rarely does (split and padded frames,
CONTINUATION, PING, GOAWAY, RST_STREAM, small windows, a stream limit) and how each failure
reaches the caller. The real peers (containerd's grpc-go, grpcio's grpc-core) are in
tests/integration/test_cri_containerd.py and the tests on the fake runtime."""

from __future__ import annotations

import socket
import struct
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import pytest
import trio
import trio.testing

from pykubelet.ports.grpc_client import Channel, RpcError, hpack
from pykubelet.ports.grpc_client import connection as connection_module
from pykubelet.ports.grpc_client.connection import Connection
from pykubelet.ports.grpc_client.frames import (
    CONTINUATION, DATA, END_HEADERS, END_STREAM, GOAWAY, HEADERS, PADDED, PING, PREFACE, RST_STREAM,
    SETTINGS, WINDOW_UPDATE, frame,
)

METHOD = b"/test.Service/Call"
MAX = 1 << 20


class Peer:
    """The server's end of one connection: reads the client's frames, writes raw ones."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.buffer = bytearray()
        self.decoder = hpack.Decoder()
        self.seen: list[tuple[int, int, int, bytes]] = []  # every frame the client sent

    async def _need(self, count: int) -> None:
        while len(self.buffer) < count:
            data = await self.stream.receive_some(65536)
            if not data:
                raise EOFError
            self.buffer += data

    async def start(self, settings: bytes = b"") -> None:
        await self._need(len(PREFACE))
        assert bytes(self.buffer[:len(PREFACE)]) == PREFACE
        del self.buffer[:len(PREFACE)]
        await self.send(frame(SETTINGS, 0, 0, settings))

    async def frame(self) -> tuple[int, int, int, bytes]:
        await self._need(9)
        length = int.from_bytes(self.buffer[:3], "big")
        await self._need(9 + length)
        kind, flags = self.buffer[3], self.buffer[4]
        stream_id = int.from_bytes(self.buffer[5:9], "big")
        payload = bytes(self.buffer[9:9 + length])
        del self.buffer[:9 + length]
        self.seen.append((kind, flags, stream_id, payload))
        return kind, flags, stream_id, payload

    async def request(self) -> tuple[int, dict[bytes, bytes], bytes]:
        """The next whole request: its stream, its headers and its message."""
        headers: dict[int, dict[bytes, bytes]] = {}
        bodies: dict[int, bytearray] = {}
        while True:
            kind, flags, stream_id, payload = await self.frame()
            if kind == HEADERS:
                headers[stream_id] = dict(self.decoder.decode(payload))
                bodies[stream_id] = bytearray()
            elif kind == DATA:
                bodies[stream_id] += payload
                if flags & END_STREAM:
                    body = bytes(bodies[stream_id])
                    assert body[0] == 0 and int.from_bytes(body[1:5], "big") == len(body) - 5
                    return stream_id, headers[stream_id], body[5:]

    async def until(self, kind: int) -> tuple[int, int, int, bytes]:
        while True:
            got = await self.frame()
            if got[0] == kind:
                return got

    async def send(self, *frames: bytes) -> None:
        await self.stream.send_all(b"".join(frames))


def response_headers(stream_id: int, flags: int = END_HEADERS) -> bytes:
    block = hpack.encode([(b":status", b"200"), (b"content-type", b"application/grpc")])
    return frame(HEADERS, flags, stream_id, block)


def message(stream_id: int, body: bytes, flags: int = 0) -> bytes:
    return frame(DATA, flags, stream_id, len(body).to_bytes(5, "big") + body)


def trailers(stream_id: int, code: int = 0, text: bytes = b"") -> bytes:
    fields = [(b"grpc-status", str(code).encode())] + ([(b"grpc-message", text)] if text else [])
    return frame(HEADERS, END_HEADERS | END_STREAM, stream_id, hpack.encode(fields))


def answer(stream_id: int, body: bytes) -> bytes:
    return response_headers(stream_id) + message(stream_id, body) + trailers(stream_id)


Handler = Callable[[Peer], Awaitable[None]]


async def echo(peer: Peer) -> None:
    """Answers one request with its own message."""
    await peer.start()
    stream_id, _, body = await peer.request()
    await peer.send(answer(stream_id, body))
    await trio.sleep_forever()


@asynccontextmanager
async def server(tmp_path, *handlers: Handler) -> AsyncIterator[str]:
    """A unix socket whose n-th connection is served by handlers[n]."""
    path = str(tmp_path / "grpc.sock")
    listener = trio.socket.socket(trio.socket.AF_UNIX, trio.socket.SOCK_STREAM)
    await listener.bind(path)
    listener.listen()

    async def serve() -> None:
        for handler in handlers:
            conn, _ = await listener.accept()
            nursery.start_soon(handle, handler, trio.SocketStream(conn))

    async def handle(handler: Handler, stream: trio.SocketStream) -> None:
        async with stream:
            try:
                await handler(Peer(stream))
            except (EOFError, trio.BrokenResourceError):
                pass

    async with trio.open_nursery() as nursery:
        nursery.start_soon(serve)
        yield path
        nursery.cancel_scope.cancel()
    listener.close()


async def call_error(path: str, timeout: float = 5, *, max_message: int = MAX) -> RpcError:
    """One call on a channel of its own that must fail: its error (the channel closed)."""
    channel = Channel(path, max_message=max_message)
    try:
        with pytest.raises(RpcError) as failed:
            await channel.unary(METHOD, b"", timeout)
        return failed.value
    finally:
        channel.close()


async def test_a_unary_call_sends_grpc_headers_and_gets_its_answer(tmp_path) -> None:
    async def handler(peer: Peer) -> None:
        await peer.start()
        stream_id, headers, body = await peer.request()
        assert headers[b":method"] == b"POST" and headers[b":path"] == METHOD
        assert headers[b"content-type"] == b"application/grpc" and headers[b"te"] == b"trailers"
        assert headers[b"grpc-timeout"] == b"2500m"
        await peer.send(answer(stream_id, body[::-1]))
        stream_id, headers, body = await peer.request()  # the same call with another deadline
        assert headers[b"grpc-timeout"] == b"7000m" and headers[b":path"] == METHOD
        await peer.send(answer(stream_id, body))
        await trio.sleep_forever()

    async with server(tmp_path, handler) as path:
        channel = Channel(path, max_message=MAX)
        assert await channel.unary(METHOD, b"hello", 2.5) == b"olleh"
        assert await channel.unary(METHOD, b"again", 7) == b"again"
        assert channel._connection.connected
        channel.close()


async def test_split_padded_and_continued_frames_are_put_together(tmp_path) -> None:
    async def handler(peer: Peer) -> None:
        await peer.start()
        stream_id, _, body = await peer.request()
        block = hpack.encode([(b":status", b"200"), (b"content-type", b"application/grpc"), (b"x-a", b"b" * 40)])
        whole = len(body).to_bytes(5, "big") + body
        padded = bytes([3]) + whole[:7] + b"\0\0\0"
        await peer.send(
            frame(HEADERS, 0, stream_id, block[:10]), frame(CONTINUATION, END_HEADERS, stream_id, block[10:]),
            frame(DATA, PADDED, stream_id, padded),
        )
        await peer.send(frame(DATA, 0, stream_id, whole[7:]), trailers(stream_id))
        await trio.sleep_forever()

    async with server(tmp_path, handler) as path:
        channel = Channel(path, max_message=MAX)
        assert await channel.unary(METHOD, b"a message of some length", 5) == b"a message of some length"
        channel.close()


async def test_an_error_status_reaches_the_caller_with_its_decoded_message(tmp_path) -> None:
    async def handler(peer: Peer) -> None:
        await peer.start()
        stream_id, _, _ = await peer.request()
        fields = [(b":status", b"200"), (b"content-type", b"application/grpc"),
                  (b"grpc-status", b"5"), (b"grpc-message", b"container %22x%22 not found: 100%25")]
        await peer.send(frame(HEADERS, END_HEADERS | END_STREAM, stream_id, hpack.encode(fields)))
        await trio.sleep_forever()

    async with server(tmp_path, handler) as path:
        error = await call_error(path)
        assert error.code == "NOT_FOUND"
        assert error.details == 'container "x" not found: 100%'


async def test_a_ping_is_answered_with_its_payload(tmp_path) -> None:
    pinged = trio.Event()

    async def handler(peer: Peer) -> None:
        await peer.start()
        stream_id, _, body = await peer.request()
        await peer.send(frame(PING, 0, 0, b"12345678"))
        _, flags, _, payload = await peer.until(PING)
        assert flags == 1 and payload == b"12345678"
        pinged.set()
        await peer.send(answer(stream_id, body))
        await trio.sleep_forever()

    async with server(tmp_path, handler) as path:
        channel = Channel(path, max_message=MAX)
        assert await channel.unary(METHOD, b"x", 5) == b"x"
        assert pinged.is_set()
        channel.close()


@pytest.mark.parametrize("window", [0, 10])
async def test_a_request_larger_than_the_window_waits_for_window_updates(tmp_path, window) -> None:
    async def handler(peer: Peer) -> None:
        await peer.start(struct.pack(">HL", 4, window))  # INITIAL_WINDOW_SIZE
        warm_up, _, body = await peer.request()  # sent before the client had our SETTINGS
        await peer.send(answer(warm_up, body))
        _, _, stream_id, _ = await peer.until(HEADERS)  # the call opens, whatever the window
        first = bytearray()
        while len(first) < window:
            first += (await peer.until(DATA))[3]
        assert len(first) == window  # all the window allowed
        await peer.send(frame(WINDOW_UPDATE, 0, stream_id, struct.pack(">L", 1000)))
        rest = bytearray()
        while True:
            _, flags, _, payload = await peer.until(DATA)
            rest += payload
            if flags & END_STREAM:
                break
        assert len(first) + len(rest) == 5 + 100
        await peer.send(answer(stream_id, b"done"))
        await trio.sleep_forever()

    async with server(tmp_path, handler) as path:
        channel = Channel(path, max_message=MAX)
        assert await channel.unary(METHOD, b"warm-up", 5) == b"warm-up"
        assert await channel.unary(METHOD, b"x" * 100, 5) == b"done"
        channel.close()


class CountingSocket(socket.socket):
    """A client socket that keeps what each of its writes took."""

    def send(self, data, *args) -> int:
        sent = super().send(data, *args)
        self.writes.append(bytes(data[:sent]))
        return sent


def frames_of(write: bytes) -> list[tuple[int, int]]:
    """(type, stream) of each whole frame in one write."""
    found = []
    while len(write) >= 9:
        length = int.from_bytes(write[:3], "big")
        found.append((write[3], int.from_bytes(write[5:9], "big")))
        write = write[9 + length:]
    return found


async def test_a_requests_headers_and_message_go_out_in_one_write(tmp_path) -> None:
    async with server(tmp_path, echo) as path:
        sock = CountingSocket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.writes = []
        sock.connect(path)
        sock.setblocking(False)
        connection = Connection.over(sock, authority=b"localhost", max_message=MAX, user_agent=b"test")
        call = await connection.start(METHOD, b"hello", 5)
        while not call.ended:
            await connection.wait(call)
        assert call.messages == [b"hello"]
        assert [(HEADERS, call.id), (DATA, call.id)] in [frames_of(w) for w in sock.writes]
        connection.close()


async def test_a_call_past_the_goaway_is_made_again_on_a_new_connection(tmp_path) -> None:
    async def going_away(peer: Peer) -> None:
        await peer.start()
        await peer.request()
        await peer.send(frame(GOAWAY, 0, 0, struct.pack(">LL", 0, 0)))  # stream 1 never processed
        await trio.sleep_forever()

    async with server(tmp_path, going_away, echo) as path:
        channel = Channel(path, max_message=MAX)
        assert await channel.unary(METHOD, b"first", 5) == b"first"  # answered by the second connection
        channel.close()


async def test_a_call_the_goaway_lets_finish_ends_there_and_that_connection_closes(tmp_path) -> None:
    async def draining(peer: Peer) -> None:
        await peer.start()
        stream_id, _, _ = await peer.request()
        await peer.send(frame(GOAWAY, 0, 0, struct.pack(">LL", stream_id, 0)))  # it may finish
        await peer.until(RST_STREAM)  # its deadline passed: the client gives it up
        assert await peer.stream.receive_some(100) == b""  # and closes the connection
        hung_up.set()

    hung_up = trio.Event()
    async with server(tmp_path, draining, echo) as path:
        channel = Channel(path, max_message=MAX)
        with pytest.raises(RpcError) as failed:
            await channel.unary(METHOD, b"", 0.3)
        assert failed.value.code == "DEADLINE_EXCEEDED"
        with trio.fail_after(10):
            await hung_up.wait()  # before anything else closes it
        assert await channel.unary(METHOD, b"next", 5) == b"next"  # on a new connection
        channel.close()


async def test_closing_the_channel_ends_a_stream_left_on_a_draining_connection(tmp_path) -> None:
    async def draining(peer: Peer) -> None:
        await peer.start()
        stream_id, _, _ = await peer.request()
        await peer.send(response_headers(stream_id), message(stream_id, b"event"))
        await peer.send(frame(GOAWAY, 0, 0, struct.pack(">LL", stream_id, 0)))
        await trio.sleep_forever()

    async with server(tmp_path, draining, echo) as path:
        channel = Channel(path, max_message=MAX)
        events = channel.stream(METHOD, b"")
        assert await events.__anext__() == b"event"
        assert await channel.unary(METHOD, b"other", 5) == b"other"  # the GOAWAY sent it elsewhere
        channel.close()
        with pytest.raises(RpcError) as failed:
            await events.__anext__()
        assert failed.value.code == "UNAVAILABLE"
        await events.aclose()


async def test_when_stream_ids_run_out_the_next_call_opens_a_new_connection(tmp_path) -> None:
    async def last_ids(peer: Peer) -> None:
        await peer.start()
        stream_id, _, body = await peer.request()
        await peer.send(answer(stream_id, body))
        await trio.sleep_forever()

    async with server(tmp_path, last_ids, echo) as path:
        channel = Channel(path, max_message=MAX)
        connection = await channel._usable()
        connection._next_id = 2**31 - 1  # the last id a client may use
        assert await channel.unary(METHOD, b"last", 5) == b"last"
        assert not connection.usable and connection.closed.is_set()
        assert await channel.unary(METHOD, b"fresh", 5) == b"fresh"
        assert channel._connection is not connection
        channel.close()


async def test_a_refused_stream_is_made_again_on_a_new_connection(tmp_path) -> None:
    async def refusing(peer: Peer) -> None:
        await peer.start()
        stream_id, _, _ = await peer.request()
        await peer.send(frame(RST_STREAM, 0, stream_id, struct.pack(">L", 7)), frame(GOAWAY, 0, 0, bytes(8)))
        await trio.sleep_forever()

    async with server(tmp_path, refusing, echo) as path:
        channel = Channel(path, max_message=MAX)
        assert await channel.unary(METHOD, b"again", 5) == b"again"
        channel.close()


@pytest.mark.parametrize(("error_code", "code"), [(8, "CANCELLED"), (2, "INTERNAL"), (11, "RESOURCE_EXHAUSTED")])
async def test_a_reset_stream_fails_its_call_by_the_reset_code(tmp_path, error_code, code) -> None:
    async def handler(peer: Peer) -> None:
        await peer.start()
        stream_id, _, _ = await peer.request()
        await peer.send(frame(RST_STREAM, 0, stream_id, struct.pack(">L", error_code)))
        await trio.sleep_forever()

    async with server(tmp_path, handler) as path:
        error = await call_error(path)
        assert error.code == code


async def test_past_its_deadline_a_call_fails_and_the_server_is_told(tmp_path) -> None:
    reset = trio.Event()

    async def handler(peer: Peer) -> None:
        await peer.start()
        stream_id, _, _ = await peer.request()
        _, _, reset_id, payload = await peer.until(RST_STREAM)
        assert reset_id == stream_id and payload == struct.pack(">L", 8)  # CANCEL
        reset.set()
        await trio.sleep_forever()

    async with server(tmp_path, handler) as path:
        channel = Channel(path, max_message=MAX)
        with pytest.raises(RpcError) as failed:
            await channel.unary(METHOD, b"", 0.2)
        assert failed.value.code == "DEADLINE_EXCEEDED" and failed.value.connected
        with trio.fail_after(10):
            await reset.wait()
        channel.close()


async def hanging(peer: Peer) -> None:
    """Answers its first request (the warm-up), then takes every request and answers none."""
    await peer.start()
    stream_id, _, body = await peer.request()
    await peer.send(answer(stream_id, body))
    while True:
        await peer.frame()


async def test_a_sooner_deadline_than_any_in_flight_wakes_the_watcher_then(tmp_path, autojump_clock) -> None:
    async with server(tmp_path, hanging) as path:
        channel = Channel(path, max_message=MAX)
        assert await channel.unary(METHOD, b"warm-up", 100) == b"warm-up"
        failures = {}

        async def call(name: str, timeout: float) -> None:
            with pytest.raises(RpcError) as failed:
                await channel.unary(METHOD, b"", timeout)
            failures[name] = (failed.value.code, trio.current_time() - started)

        started = trio.current_time()
        with trio.fail_after(500):  # (a watcher that never wakes would hang here)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(call, "long", 100)
                await trio.testing.wait_all_tasks_blocked()  # the watcher sleeps until the long one's deadline
                nursery.start_soon(call, "short", 2)
        assert failures["short"] == ("DEADLINE_EXCEEDED", pytest.approx(2, abs=0.01))
        assert failures["long"] == ("DEADLINE_EXCEEDED", pytest.approx(100, abs=0.01))
        channel.close()


async def test_after_calls_that_ended_in_time_the_next_deadline_still_fails_its_call(tmp_path, autojump_clock) -> None:
    async with server(tmp_path, hanging) as path:
        channel = Channel(path, max_message=MAX)
        assert await channel.unary(METHOD, b"warm-up", 1) == b"warm-up"  # the watcher wakes at its deadline
        await trio.sleep(0.5)
        started = trio.current_time()
        with trio.fail_after(500), pytest.raises(RpcError) as failed:
            await channel.unary(METHOD, b"", 5)  # its deadline is later: the watcher is not brought forward
        assert failed.value.code == "DEADLINE_EXCEEDED"
        assert trio.current_time() - started == pytest.approx(5, abs=0.01)
        channel.close()


async def test_a_call_held_for_a_stream_slot_fails_at_its_deadline_unsent(tmp_path, autojump_clock) -> None:
    async def handler(peer: Peer) -> None:
        await peer.start(struct.pack(">HL", 3, 1))  # MAX_CONCURRENT_STREAMS 1
        stream_id, _, body = await peer.request()
        await peer.send(answer(stream_id, body))
        await peer.request()  # the one held open, never answered
        while True:
            kind, _, _, _ = await peer.frame()
            assert kind != HEADERS  # the held call never goes out

    async with server(tmp_path, handler) as path:
        channel = Channel(path, max_message=MAX)
        assert await channel.unary(METHOD, b"warm-up", 5) == b"warm-up"
        async with trio.open_nursery() as nursery:
            nursery.start_soon(call_held_open, channel, 100)
            await trio.testing.wait_all_tasks_blocked()
            started = trio.current_time()
            with trio.fail_after(50), pytest.raises(RpcError) as failed:
                await channel.unary(METHOD, b"held", 3)
            assert failed.value.code == "DEADLINE_EXCEEDED"
            assert trio.current_time() - started == pytest.approx(3, abs=0.01)
            nursery.cancel_scope.cancel()
        channel.close()


async def test_a_failing_watcher_fails_the_connection_not_the_trio_run(tmp_path, autojump_clock, monkeypatch) -> None:
    def broken(**_: object) -> RpcError:
        raise RuntimeError("a bug")

    monkeypatch.setattr(connection_module, "deadline_exceeded", broken)
    async with server(tmp_path, hanging, echo) as path:
        channel = Channel(path, max_message=MAX)
        assert await channel.unary(METHOD, b"warm-up", 5) == b"warm-up"
        with trio.fail_after(50), pytest.raises(RpcError) as failed:
            await channel.unary(METHOD, b"", 2)
        assert failed.value.code == "INTERNAL" and "deadline watcher failed" in failed.value.details
        assert await channel.unary(METHOD, b"next", 5) == b"next"  # on a new connection
        channel.close()


async def call_held_open(channel: Channel, timeout: float) -> None:
    """A call the server never answers: it ends past its deadline, or cancelled."""
    with pytest.raises(RpcError):
        await channel.unary(METHOD, b"", timeout)


def task_names() -> list[str]:
    names = []

    def walk(task: trio.lowlevel.Task) -> None:
        names.append(task.name)
        for nursery in task.child_nurseries:
            for child in nursery.child_tasks:
                walk(child)

    walk(trio.lowlevel.current_root_task())
    return names


async def test_a_closed_connection_leaves_no_watcher_or_reader_behind(tmp_path) -> None:
    async with server(tmp_path, echo) as path:
        channel = Channel(path, max_message=MAX)
        assert await channel.unary(METHOD, b"x", 100) == b"x"  # the watcher sleeps until then
        assert any(name.startswith("grpc deadlines") for name in task_names())
        channel.close()
        with trio.fail_after(10):
            while any(name.startswith("grpc ") for name in task_names()):
                await trio.sleep(0.01)


async def test_a_cancelled_caller_resets_its_stream(tmp_path) -> None:
    reset = trio.Event()
    asked = trio.Event()

    async def handler(peer: Peer) -> None:
        await peer.start()
        await peer.request()
        asked.set()
        await peer.until(RST_STREAM)
        reset.set()
        await trio.sleep_forever()

    async with server(tmp_path, handler) as path:
        channel = Channel(path, max_message=MAX)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(channel.unary, METHOD, b"", None)
            await asked.wait()
            nursery.cancel_scope.cancel()
        with trio.fail_after(10):
            await reset.wait()
        channel.close()


async def test_a_server_that_never_speaks_http2_fails_the_call_as_not_connected(tmp_path) -> None:
    async def silent(peer: Peer) -> None:
        await trio.sleep_forever()

    async with server(tmp_path, silent) as path:
        error = await call_error(path, 0.2)
        assert error.code == "DEADLINE_EXCEEDED" and not error.connected


async def test_an_http1_server_is_named_as_such(tmp_path) -> None:
    async def http1(peer: Peer) -> None:
        await peer.send(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
        await trio.sleep_forever()

    async with server(tmp_path, http1) as path:
        error = await call_error(path)
        assert error.code == "UNAVAILABLE" and "http1.x" in error.details


async def test_an_answer_above_the_limit_fails_and_resets_its_stream(tmp_path) -> None:
    async def handler(peer: Peer) -> None:
        await peer.start()
        stream_id, _, _ = await peer.request()
        await peer.send(response_headers(stream_id), message(stream_id, b"y" * 2000))
        await peer.until(RST_STREAM)
        await trio.sleep_forever()

    async with server(tmp_path, handler) as path:
        error = await call_error(path, max_message=1000)
        assert error.code == "RESOURCE_EXHAUSTED"


async def test_a_second_message_on_a_unary_call_fails_it(tmp_path) -> None:
    async def chatty(peer: Peer) -> None:
        await peer.start()
        stream_id, _, _ = await peer.request()
        await peer.send(response_headers(stream_id), message(stream_id, b"one"), message(stream_id, b"two"))
        await peer.until(RST_STREAM)
        await trio.sleep_forever()

    async with server(tmp_path, chatty) as path:
        error = await call_error(path)
        assert error.code == "INTERNAL" and "more than one message" in error.details


async def test_an_endless_header_block_ends_the_connection(tmp_path) -> None:
    async def endless(peer: Peer) -> None:
        await peer.start()
        stream_id, _, _ = await peer.request()
        await peer.send(frame(HEADERS, 0, stream_id, b""))
        for _ in range(40):  # 40 x 2 KiB, past the 64 KiB a header block may hold
            await peer.send(frame(CONTINUATION, 0, stream_id, b"\0" * 2048))
        await peer.until(GOAWAY)

    async with server(tmp_path, endless) as path:
        error = await call_error(path)
        assert "header block over" in error.details


async def test_one_oversized_header_frame_ends_the_connection(tmp_path) -> None:
    async def oversized(peer: Peer) -> None:
        await peer.start()
        stream_id, _, _ = await peer.request()
        await peer.send(frame(HEADERS, END_HEADERS, stream_id, b"\x88" * 70000))
        await peer.until(GOAWAY)

    async with server(tmp_path, oversized) as path:
        error = await call_error(path)
        assert "header block over" in error.details


async def test_an_answer_before_the_whole_request_resets_the_unsent_rest(tmp_path) -> None:
    async def early(peer: Peer) -> None:
        await peer.start(struct.pack(">HL", 4, 10))  # INITIAL_WINDOW_SIZE 10
        warm_up, _, body = await peer.request()
        await peer.send(answer(warm_up, body))
        _, _, stream_id, _ = await peer.until(DATA)  # the first 10 bytes, then it waits
        fields = [(b":status", b"200"), (b"content-type", b"application/grpc"), (b"grpc-status", b"12")]
        await peer.send(frame(HEADERS, END_HEADERS | END_STREAM, stream_id, hpack.encode(fields)))
        _, _, reset_id, payload = await peer.until(RST_STREAM)
        assert reset_id == stream_id and payload == struct.pack(">L", 8)
        await trio.sleep_forever()

    async with server(tmp_path, early) as path:
        channel = Channel(path, max_message=MAX)
        assert await channel.unary(METHOD, b"warm-up", 5) == b"warm-up"
        with pytest.raises(RpcError) as failed:
            await channel.unary(METHOD, b"x" * 100, 5)
        assert failed.value.code == "UNIMPLEMENTED"
        with trio.fail_after(10):
            while [f for f in channel._connection._calls]:
                await trio.sleep(0.01)
        channel.close()


async def test_a_stream_gets_window_back_as_its_messages_are_taken(tmp_path, monkeypatch) -> None:
    # A window of 1000 with messages of at most 200: it goes back once 500 bytes were taken.
    monkeypatch.setattr(connection_module, "STREAM_WINDOW", 1000)

    async def streaming(peer: Peer) -> None:
        await peer.start()
        stream_id, _, _ = await peer.request()
        await peer.send(response_headers(stream_id), *(message(stream_id, bytes([i]) * 200) for i in range(3)))
        _, _, update_id, payload = await peer.until(WINDOW_UPDATE)
        assert update_id == stream_id and int.from_bytes(payload, "big") == 3 * 205  # all three, when taken
        taken.set()
        await peer.send(trailers(stream_id))
        await trio.sleep_forever()

    taken = trio.Event()
    async with server(tmp_path, streaming) as path:
        channel = Channel(path, max_message=200)
        events = channel.stream(METHOD, b"")
        assert await events.__anext__() == b"\0" * 200
        assert await events.__anext__() == b"\1" * 200
        await trio.testing.wait_all_tasks_blocked()
        assert not taken.is_set()  # 410 bytes taken: not yet
        assert [m async for m in events] == [b"\2" * 200]
        assert taken.is_set()
        channel.close()


async def test_a_missing_socket_fails_at_once_naming_the_cause(tmp_path) -> None:
    channel = Channel(str(tmp_path / "none.sock"), max_message=MAX)
    with pytest.raises(RpcError) as failed:
        await channel.unary(METHOD, b"", 5)
    assert failed.value.code == "UNAVAILABLE" and "No such file or directory" in failed.value.details
    assert not failed.value.connected


async def test_a_connection_closed_mid_call_fails_it_and_the_next_call_reconnects(tmp_path) -> None:
    async def closing(peer: Peer) -> None:
        await peer.start()
        await peer.request()
        await peer.stream.aclose()

    async with server(tmp_path, closing, echo) as path:
        channel = Channel(path, max_message=MAX)
        with pytest.raises(RpcError) as failed:
            await channel.unary(METHOD, b"one", 5)
        assert failed.value.code == "UNAVAILABLE"
        assert await channel.unary(METHOD, b"two", 5) == b"two"
        channel.close()


async def test_calls_made_together_end_each_as_alone(tmp_path) -> None:
    async def handler(peer: Peer) -> None:
        await peer.start()
        first, _, body = await peer.request()
        second, _, _ = await peer.request()
        await peer.send(trailers(second, 5, b"gone"), answer(first, body))
        await trio.sleep_forever()

    async with server(tmp_path, handler) as path:
        channel = Channel(path, max_message=MAX)
        ok, failed = await channel.unary_all([(METHOD, b"a"), (METHOD, b"b")], 5)
        assert ok == b"a"
        assert isinstance(failed, RpcError) and failed.code == "NOT_FOUND"
        channel.close()


async def test_calls_made_together_fail_at_the_batchs_deadline_even_one_started_late(tmp_path, autojump_clock) -> None:
    reset = trio.Event()

    async def handler(peer: Peer) -> None:
        await peer.start(struct.pack(">HL", 4, 0))  # INITIAL_WINDOW_SIZE 0: each body waits for window
        warm_up, _, body = await peer.request()  # sent before the client had our SETTINGS
        await peer.send(answer(warm_up, body))
        _, _, first, _ = await peer.until(HEADERS)
        await trio.sleep(2)  # the first call's start() takes 2 s: the second starts late
        await peer.send(frame(WINDOW_UPDATE, 0, first, struct.pack(">L", 1000)))
        while not (await peer.until(DATA))[1] & END_STREAM:
            pass
        await peer.send(answer(first, b"a"))
        _, _, second, _ = await peer.until(HEADERS)
        await peer.send(frame(WINDOW_UPDATE, 0, second, struct.pack(">L", 1000)))
        _, _, reset_id, _ = await peer.until(RST_STREAM)  # never answered: reset at the deadline
        assert reset_id == second
        reset.set()
        await trio.sleep_forever()

    async with server(tmp_path, handler) as path:
        channel = Channel(path, max_message=MAX)
        assert await channel.unary(METHOD, b"warm-up", 5) == b"warm-up"
        started = trio.current_time()
        with trio.fail_after(500):
            ok, failed = await channel.unary_all([(METHOD, b"a"), (METHOD, b"b")], 3)
        assert trio.current_time() - started == pytest.approx(3, abs=0.01)  # the batch's 3 s, not 2 + 3
        assert ok == b"a"
        assert isinstance(failed, RpcError) and failed.code == "DEADLINE_EXCEEDED" and failed.connected
        with trio.fail_after(10):
            await reset.wait()
        channel.close()


async def test_the_servers_stream_limit_holds_a_call_until_one_ends(tmp_path) -> None:
    async def handler(peer: Peer) -> None:
        await peer.start(struct.pack(">HL", 3, 1))  # MAX_CONCURRENT_STREAMS 1
        warm_up, _, body = await peer.request()  # sent before the client had our SETTINGS
        await peer.send(answer(warm_up, body))
        first, _, body = await peer.request()
        await trio.testing.wait_all_tasks_blocked()  # both callers are where they wait
        assert len(channel._connection._calls) == 1  # the second waits for a stream
        await peer.send(answer(first, body))
        second, _, body = await peer.request()
        await peer.send(answer(second, body))
        await trio.sleep_forever()

    async with server(tmp_path, handler) as path:
        channel = Channel(path, max_message=MAX)
        assert await channel.unary(METHOD, b"warm-up", 5) == b"warm-up"
        results = {}

        async def call(name: bytes) -> None:
            results[name] = await channel.unary(METHOD, name, 5)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(call, b"a")
            nursery.start_soon(call, b"b")
        assert results == {b"a": b"a", b"b": b"b"}
        channel.close()


async def test_a_server_stream_yields_each_message_then_ends(tmp_path) -> None:
    async def handler(peer: Peer) -> None:
        await peer.start()
        stream_id, _, _ = await peer.request()
        await peer.send(response_headers(stream_id), message(stream_id, b"1"))
        await peer.send(message(stream_id, b"2") + message(stream_id, b"3"), trailers(stream_id))
        await trio.sleep_forever()

    async with server(tmp_path, handler) as path:
        channel = Channel(path, max_message=MAX)
        assert [m async for m in channel.stream(METHOD, b"")] == [b"1", b"2", b"3"]
        channel.close()


async def test_closing_the_channel_fails_calls_in_flight_and_after(tmp_path) -> None:
    asked = trio.Event()

    async def handler(peer: Peer) -> None:
        await peer.start()
        await peer.request()
        asked.set()
        await trio.sleep_forever()

    async with server(tmp_path, handler) as path:
        channel = Channel(path, max_message=MAX)
        failures = []

        async def call() -> None:
            try:
                await channel.unary(METHOD, b"", None)
            except RpcError as error:
                failures.append(error)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(call)
            await asked.wait()
            channel.close()
        assert [f.code for f in failures] == ["UNAVAILABLE"]
        with pytest.raises(RpcError):
            await channel.unary(METHOD, b"", 5)
