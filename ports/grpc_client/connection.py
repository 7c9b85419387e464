"""One HTTP/2 connection to a gRPC server, driven by trio alone: no thread, no other event
loop. Requests go out on the caller's own step through one ordered output buffer (a writer
task only drains what the socket did not take at once); a reader task takes the server's
frames as the socket becomes readable and wakes the calls they end (incoming.py); a
watcher task fails the calls whose deadline passed.

A call costs one wake-up of the reader and one of the caller, where grpcio cost thread
hops and its own threads (docs/performance.md, "The CRI port on a gRPC client of its own").
Its deadline costs it no cancel scope of its own (trio's scopes cost a call a fifth of its
Python work): one watcher per connection sleeps until the earliest deadline in flight
("One deadline watcher a connection").
"""

from __future__ import annotations

import functools
import math
import socket
import struct
from collections.abc import Callable

import trio

from . import hpack
from .call import Call
from .frames import (
    CANCEL, CONNECTION_WINDOW, CONTINUATION, DATA, DEFAULT_WINDOW, END_HEADERS, END_STREAM, ENABLE_PUSH, HEADERS,
    INITIAL_WINDOW_SIZE, LAST_STREAM_ID, MAX_FRAME, MAX_FRAME_SIZE, OUTGOING_LIMIT, PREFACE, RST_STREAM, SETTINGS,
    STREAM_WINDOW, WINDOW_UPDATE, frame, grpc_timeout,
)
from .incoming import IncomingFrames
from .status import RpcError, deadline_exceeded


class Connection(IncomingFrames):
    """Open with Connection.open(path); many calls may run on it at once. Once it fails or
    the server sends GOAWAY it takes no new call (`usable` is False)."""

    def __init__(
        self, sock: socket.socket, authority: bytes, max_message: int, user_agent: bytes,
        close: Callable[[socket.socket], None],
    ) -> None:
        if max_message + 5 > STREAM_WINDOW // 2:
            raise ValueError(f"max_message {max_message}: a stream's window must hold two of the largest messages")
        self._socket = sock
        self._closer = close
        self._authority = authority
        self._user_agent = user_agent
        self.max_message = max_message
        # A stream's window goes back once this much was taken: what stays out of it always
        # leaves room for one more largest message with its prefix, padding included.
        self._window_threshold = min(STREAM_WINDOW // 2, STREAM_WINDOW - max_message - 5 - 256)
        self._decoder = hpack.Decoder()
        self._calls: dict[int, Call] = {}
        self._next_id = 1
        self._outgoing = bytearray()
        self._writer_lot = trio.lowlevel.ParkingLot()
        self._window_lot = trio.lowlevel.ParkingLot()  # calls waiting for send window or a stream slot
        self._send_window = DEFAULT_WINDOW
        self._peer_window = DEFAULT_WINDOW  # SETTINGS_INITIAL_WINDOW_SIZE of the server
        self._peer_max_frame = 16384
        self._peer_max_streams = 2**31
        self._received = bytearray()
        self._unacked = 0
        self._continued: tuple[int, int, bytearray] | None = None  # a header block's frames so far
        self.connected = False  # the server's SETTINGS came: it speaks HTTP/2
        self.usable = True
        self.failure: RpcError | None = None
        self._write_failed = False  # the socket refused a write: read what the server said, send nothing
        self.closed = trio.Event()  # set once the socket is closed
        self._watch = trio.CancelScope()  # the watcher's sleep, until...
        self._watch_at = math.inf  # ... the earliest deadline in flight when it last looked, or sooner

    @classmethod
    def open(cls, path: str, *, max_message: int, user_agent: bytes, authority: bytes = b"localhost") -> Connection:
        """A connection to the server on the unix socket `path` (it connects at once or fails:
        RpcError UNAVAILABLE naming the cause)."""
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.setblocking(False)
        try:
            sock.connect(path)
        except OSError as error:
            sock.close()
            raise RpcError("UNAVAILABLE", f"connect: {error.strerror or error}", connected=False) from None
        return cls.over(sock, authority=authority, max_message=max_message, user_agent=user_agent)

    @classmethod
    def over(
        cls, sock: socket.socket, *, authority: bytes, max_message: int, user_agent: bytes,
        close: Callable[[socket.socket], None] | None = None,
    ) -> Connection:
        """HTTP/2 on a connected non-blocking socket, which the connection owns from now on
        (`close` closes it; by default, after telling trio). The reader and the writer run
        as trio system tasks: they end with the connection."""
        connection = cls(sock, authority, max_message, user_agent, close or _close)
        settings = struct.pack(">HLHLHL", ENABLE_PUSH, 0, INITIAL_WINDOW_SIZE, STREAM_WINDOW, MAX_FRAME_SIZE, MAX_FRAME)
        connection._push(
            PREFACE + frame(SETTINGS, 0, 0, settings)
            + frame(WINDOW_UPDATE, 0, 0, struct.pack(">L", CONNECTION_WINDOW - DEFAULT_WINDOW))
        )
        trio.lowlevel.spawn_system_task(connection._read, name=f"grpc reader {authority.decode()}")
        trio.lowlevel.spawn_system_task(connection._write, name=f"grpc writer {authority.decode()}")
        trio.lowlevel.spawn_system_task(connection._watch_deadlines, name=f"grpc deadlines {authority.decode()}")
        return connection

    # -- calls --------------------------------------------------------------------------

    async def start(self, path: bytes, request: bytes, timeout: float | None, *, streaming: bool = False) -> Call:
        """Send a request: the call is in flight when this returns (or waits for flow
        control to send the rest of a large request). `timeout` seconds after this (None:
        never) the call fails with DEADLINE_EXCEEDED, and the server is told."""
        await trio.lowlevel.checkpoint_if_cancelled()
        if timeout is not None and timeout <= 0:  # past its deadline already: nothing goes out
            raise deadline_exceeded(connected=self.connected)
        deadline = math.inf if timeout is None else trio.current_time() + timeout
        if len(request) > self.max_message:
            raise RpcError("RESOURCE_EXHAUSTED",
                           f"the request is {len(request)} bytes, above the {self.max_message} allowed",
                           connected=self.connected)
        if len(self._calls) >= self._peer_max_streams:
            with trio.move_on_at(deadline) as waited:
                while self.usable and len(self._calls) >= self._peer_max_streams:
                    await self._window_lot.park()
            if waited.cancelled_caught:
                raise deadline_exceeded(connected=self.connected)
        self._check_usable()
        limit = None if timeout is None else grpc_timeout(timeout)
        block = request_block(path, self._authority, self._user_agent, limit)
        call = Call(self.max_message, streaming)
        call.id = self._next_id
        self._next_id += 2
        if self._next_id > LAST_STREAM_ID:  # ids run out: the next call goes to a new connection
            self.usable = False
        call.send_window = self._peer_window
        call.deadline = deadline
        self._calls[call.id] = call
        if deadline < self._watch_at:  # sooner than the watcher wakes: it wakes then
            self._watch_at = self._watch.deadline = deadline
        body = len(request).to_bytes(5, "big") + request  # flag 0 (not compressed), length
        await self._send_data(call, self._header_frames(call.id, block), body)
        return call

    async def wait(self, call: Call) -> None:
        """Until the call ended (a streaming call: or has a message). Cancelled: the server
        is told (RST_STREAM)."""
        if call.ended or call.streaming and call.messages:
            return
        await self._park(call)

    async def _park(self, call: Call, lot: trio.lowlevel.ParkingLot | None = None) -> None:
        """Until the reader wakes `call`'s caller, or with `lot` until it is woken (the
        windows or the stream slots changed); a caller cancelled meanwhile cancels the call."""
        try:
            await (call.changed() if lot is None else lot.park())
        except BaseException:
            self.cancel(call)
            raise

    def cancel(self, call: Call, error: RpcError | None = None) -> None:
        """The call ends here, with `error` (by default CANCELLED), and the server is told."""
        if not call.ended and call.id in self._calls:
            call.cancelled = call.reset = True
            call.fail(error or RpcError("CANCELLED", "cancelled by the caller", connected=self.connected))
            self._push(frame(RST_STREAM, 0, call.id, struct.pack(">L", CANCEL)))
            self._forget(call)

    async def _watch_deadlines(self) -> None:
        """The watcher: sleeps until the earliest deadline in flight (start() brings a
        sooner one forward), then fails each call past its deadline. It wakes at most once
        for calls that ended before their deadline, at the earliest of them, then sleeps
        until the earliest still in flight: calls with the same timeout wake it about once
        per timeout, where a cancel scope per call costs every call."""
        try:
            while self._socket.fileno() >= 0:
                self._watch = trio.CancelScope(deadline=self._watch_at)
                with self._watch:
                    await trio.sleep_forever()
                now = trio.current_time()
                earliest = math.inf
                for call in list(self._calls.values()):  # (cancel() takes calls out)
                    if call.deadline <= now:
                        self.cancel(call, deadline_exceeded(connected=self.connected))
                    elif call.deadline < earliest:
                        earliest = call.deadline
                self._watch_at = earliest
        except Exception as error:  # a bug here must not end the trio run (a system task)
            self._fail(RpcError("INTERNAL", f"the gRPC client's deadline watcher failed: {error!r}",
                                connected=self.connected))

    def take_message(self, call: Call) -> bytes:
        """A streaming call's next message, taken by its caller: only now does the server
        get window for it, so a slow reader holds the server back instead of piling up."""
        message = call.messages.pop(0)
        call.unacked += len(message) + 5
        self._return_window(call)
        return message

    def _return_window(self, call: Call) -> None:
        if call.unacked >= self._window_threshold and call.id in self._calls:
            self._push(frame(WINDOW_UPDATE, 0, call.id, struct.pack(">L", call.unacked)))
            call.unacked = 0

    def close(self, details: str = "the connection was closed during the call") -> None:
        self._fail(RpcError("UNAVAILABLE", details, connected=self.connected))

    def _check_usable(self) -> None:
        if not self.usable:  # an error of its own for each caller; never sent, so it may go elsewhere
            failure = self.failure or RpcError("UNAVAILABLE", "the connection takes no new call",
                                               connected=self.connected)
            raise RpcError(failure.code, failure.details, connected=failure.connected, retryable=True)

    def _header_frames(self, stream_id: int, block: bytes) -> bytes:
        size = self._peer_max_frame
        if len(block) <= size:
            return frame(HEADERS, END_HEADERS, stream_id, block)
        chunks = [block[i:i + size] for i in range(0, len(block), size)]
        out = [frame(HEADERS, 0, stream_id, chunks[0])]
        out += [frame(CONTINUATION, 0, stream_id, chunk) for chunk in chunks[1:-1]]
        out.append(frame(CONTINUATION, END_HEADERS, stream_id, chunks[-1]))
        return b"".join(out)

    async def _send_data(self, call: Call, headers: bytes, body: bytes) -> None:
        """The request's `headers`, then its `body` in DATA frames as the windows allow. The
        headers go out in one write with the first DATA frame: one wake-up of the server's
        reader, not two."""
        sent = 0
        while True:
            room = min(len(body) - sent, self._send_window, call.send_window, self._peer_max_frame)
            if room > 0 or sent == len(body):
                chunk = body[sent:sent + room]
                sent += room
                self._send_window -= room
                call.send_window -= room
                self._push(headers + frame(DATA, END_STREAM if sent == len(body) else 0, call.id, chunk))
                headers = b""
                if sent == len(body):
                    return
                continue
            if headers:  # no window for any of the body yet: the server may start the call
                self._push(headers)
                headers = b""
            if call.ended:  # answered, failed or reset meanwhile: its request stays unfinished
                if not call.reset:
                    call.reset = True
                    self._push(frame(RST_STREAM, 0, call.id, struct.pack(">L", CANCEL)))
                return
            await self._park(call, self._window_lot)

    # -- the writer -----------------------------------------------------------------------

    def _push(self, data: bytes) -> None:
        if self._socket.fileno() < 0 or self._write_failed:
            return  # failed or closed: nothing more goes out
        if self._outgoing:  # behind what the socket did not take yet, in order
            self._outgoing += data
            if len(self._outgoing) > OUTGOING_LIMIT:
                self._fail(RpcError("UNAVAILABLE", "the server stopped reading the connection",
                                    connected=self.connected))
            return
        try:
            sent = self._socket.send(data)
        except BlockingIOError:
            sent = 0
        except OSError as error:
            self._send_failed(error)
            return
        if sent < len(data):
            self._outgoing += data[sent:]
            self._writer_lot.unpark_all()

    def _send_failed(self, error: OSError) -> None:
        # The server closed: what it sent before (answers, a GOAWAY, an HTTP/1.x server's
        # "400 Bad Request") is still to be read, and names the outcome better than the
        # broken pipe. The reader reads on to the end; the calls' deadlines bound the rest.
        self._write_failed = True
        self._outgoing.clear()
        if self.usable:
            self.usable = False
            self.failure = RpcError("UNAVAILABLE", f"send: {error.strerror or error}", connected=self.connected)
        for call in [c for c in self._calls.values() if c.streaming]:  # no window can go back to its server
            call.fail(RpcError("UNAVAILABLE", f"send: {error.strerror or error}", connected=self.connected))
            self._forget(call)
        self._window_lot.unpark_all()  # a large request waiting for window stops waiting
        if not self._calls:
            self._close_socket()

    async def _write(self) -> None:
        try:
            while self._socket.fileno() >= 0:
                if not self._outgoing:
                    await self._writer_lot.park()
                    continue
                await trio.lowlevel.wait_writable(self._socket)
                try:
                    sent = self._socket.send(self._outgoing)
                except BlockingIOError:
                    continue
                except OSError as error:
                    self._send_failed(error)
                    continue
                del self._outgoing[:sent]
        except trio.ClosedResourceError:
            pass  # closed by _fail or _close_socket, which failed what was in flight
        except Exception as error:  # a bug here must not end the trio run (a system task)
            self._fail(RpcError("INTERNAL", f"the gRPC client's writer failed: {error!r}", connected=self.connected))

    def _finish(self, call: Call, code: str, details: str) -> None:
        call.end(code, details)
        self._forget(call)

    def _reset(self, call: Call, error: RpcError) -> None:
        call.reset = True
        call.fail(error)
        self._push(frame(RST_STREAM, 0, call.id, struct.pack(">L", CANCEL)))
        self._forget(call)

    def _forget(self, call: Call) -> None:
        """The call is over on this connection: its stream slot is free, and a connection
        that takes no new call closes with its last one."""
        self._calls.pop(call.id, None)
        if self._window_lot:  # (every call ends here: the lot's unpark_all costs more than the check)
            self._window_lot.unpark_all()
        if not self.usable and not self._calls:
            self._close_socket()

    def _fail(self, error: RpcError) -> None:
        if self.failure is None or self.usable:
            self.failure = error
        self.usable = False
        calls, self._calls = self._calls, {}
        for call in calls.values():  # an error of its own each: each caller raises it
            call.fail(RpcError(error.code, error.details, connected=error.connected))
        self._window_lot.unpark_all()
        self._close_socket()

    def _close_socket(self) -> None:
        if self._socket.fileno() >= 0:
            self._closer(self._socket)
        self._writer_lot.unpark_all()
        self._watch.cancel()  # the watcher ends
        self.closed.set()


@functools.lru_cache(maxsize=256)
def request_block(path: bytes, authority: bytes, user_agent: bytes, timeout: bytes | None) -> bytes:
    """A request's header block. The encoder never indexes, so a block depends on its
    fields alone and the same call (a probe's, a relist's) reuses it."""
    headers = [
        (b":method", b"POST"), (b":scheme", b"http"), (b":path", path), (b":authority", authority),
        (b"content-type", b"application/grpc"), (b"te", b"trailers"), (b"user-agent", user_agent),
    ]
    if timeout is not None:
        headers.append((b"grpc-timeout", timeout))
    return hpack.encode(headers)


def _close(sock: socket.socket) -> None:
    trio.lowlevel.notify_closing(sock)  # the reader and the writer wake with ClosedResourceError
    sock.close()

