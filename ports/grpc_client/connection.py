"""One HTTP/2 connection to a gRPC server on a unix socket, driven by trio alone: no thread,
no other event loop. A reader task takes the server's frames as the socket becomes
readable and wakes the calls they finish; requests go out on the caller's own step through
one ordered output buffer (a writer task only drains what the socket did not take at once).

A call costs one wake-up of the reader and one of the caller, where grpcio's own loop
costs several thread hops (docs/performance.md, "The CRI port").
"""

from __future__ import annotations

import math
import socket
import struct
from collections.abc import Callable, Iterator

import trio

from . import hpack
from .status import RpcError, code_name, http_code, message, reset_code

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

# Frame types and flags (RFC 9113 6).
DATA, HEADERS, PRIORITY, RST_STREAM, SETTINGS, PUSH_PROMISE, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = range(10)
END_STREAM = ACK = 0x1
END_HEADERS = 0x4
PADDED = 0x8
PRIORITY_FLAG = 0x20

# Settings (RFC 9113 6.5.2) and error codes (7).
HEADER_TABLE_SIZE, ENABLE_PUSH, MAX_CONCURRENT_STREAMS, INITIAL_WINDOW_SIZE, MAX_FRAME_SIZE = 1, 2, 3, 4, 5
PROTOCOL_ERROR, FLOW_CONTROL_ERROR, FRAME_SIZE_ERROR, REFUSED_STREAM, CANCEL, COMPRESSION_ERROR = (
    0x1, 0x3, 0x6, 0x7, 0x8, 0x9)

# What we let the server send before it must wait for a WINDOW_UPDATE: a stream's window
# holds two of the largest messages allowed (a unary answer never waits for one; a stream
# gets its window back in halves as its messages are taken), the connection's many such.
# Credit only: nothing is allocated for it.
STREAM_WINDOW = 1 << 26
CONNECTION_WINDOW = 1 << 30
MAX_FRAME = 1 << 20  # the largest frame we accept: fewer frames for a big list answer
_DEFAULT_WINDOW = 65535  # RFC 9113 6.9.2
_HEADER = struct.Struct(">HBBBL")  # length (24 bits, as 16 + 8), type, flags, stream id
_RECEIVE = 1 << 18
MAX_HEADER_BLOCK = 1 << 16  # a header block longer than this ends the connection (grpc's metadata is 8-16 KiB)
_OUTGOING_LIMIT = 1 << 26  # bytes waiting for a server that does not read: past it, the connection fails
_LAST_STREAM_ID = 2**31 - 1
_HTTP1 = "Trying to connect an http1.x server: it answered HTTP/1.x"


def frame(kind: int, flags: int, stream_id: int, payload: bytes = b"") -> bytes:
    length = len(payload)
    return _HEADER.pack(length >> 8, length & 0xFF, kind, flags, stream_id) + payload


def grpc_timeout(seconds: float) -> bytes:
    """A grpc-timeout header value: at most 8 digits and a unit (gRPC's PROTOCOL-HTTP2.md)."""
    milliseconds = max(1, math.ceil(seconds * 1000))
    if milliseconds < 10**8:
        return b"%dm" % milliseconds
    return b"%dS" % min(math.ceil(seconds), 10**8 - 1)


class Call:
    """One stream: the request sent, the answer's messages as they come, its status at the
    end. The connection's reader fills it in; the caller parks until it changes."""

    __slots__ = ("id", "send_window", "lot", "headers", "http_status", "messages", "partial",
                 "code", "details", "error", "unacked", "max_message", "cancelled", "streaming", "reset")

    def __init__(self, max_message: int, streaming: bool) -> None:
        self.id = 0
        self.streaming = streaming  # its caller wakes for each message, not only at the end
        self.send_window = 0
        self.lot = trio.lowlevel.ParkingLot()
        self.headers = False  # the response headers came
        self.http_status = 0
        self.messages: list[bytes] = []
        self.partial = bytearray()
        self.code: str | None = None  # set when the call ended
        self.details = ""
        self.error: RpcError | None = None
        self.unacked = 0
        self.max_message = max_message
        self.cancelled = False  # by the caller (or its deadline), not by the server
        self.reset = False  # a RST_STREAM went either way: no more frames for it

    @property
    def ended(self) -> bool:
        return self.code is not None or self.error is not None

    def take_data(self, payload: bytes) -> None:
        """The messages in a DATA frame's payload. A unary call takes one message: a second
        is _TooMany (grpcio refuses it too), so nothing a server sends piles up here."""
        if not self.partial and len(payload) >= 5 and payload[0] == 0:
            # The usual case: one DATA frame is one whole message.
            length = int.from_bytes(payload[1:5], "big")
            if length == len(payload) - 5:
                if length > self.max_message:
                    raise _TooLarge(length)
                self._append(payload[5:])
                return
        self.partial += payload
        while len(self.partial) >= 5:
            if self.partial[0] != 0:
                raise _Compressed()
            length = int.from_bytes(self.partial[1:5], "big")
            if length > self.max_message:
                raise _TooLarge(length)
            if len(self.partial) < 5 + length:
                return
            self._append(bytes(self.partial[5:5 + length]))
            del self.partial[:5 + length]

    def _append(self, message: bytes) -> None:
        if self.messages and not self.streaming:
            raise _TooMany()
        self.messages.append(message)

    def end(self, code: str, details: str) -> None:
        if not self.ended:
            self.code, self.details = code, details
        self.lot.unpark_all()

    def fail(self, error: RpcError) -> None:
        if not self.ended:
            self.error = error
        self.lot.unpark_all()


class _TooLarge(Exception):
    def __init__(self, length: int) -> None:
        self.length = length


class _Compressed(Exception):
    pass


class _TooMany(Exception):
    pass


class _ConnectionError(Exception):
    """The server broke HTTP/2: the connection ends with GOAWAY and this code."""

    def __init__(self, code: int, details: str) -> None:
        super().__init__(details)
        self.code = code
        self.details = details


class Connection:
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
        self._send_window = _DEFAULT_WINDOW
        self._peer_window = _DEFAULT_WINDOW  # SETTINGS_INITIAL_WINDOW_SIZE of the server
        self._peer_max_frame = 16384
        self._peer_max_streams = 2**31
        self._received = bytearray()
        self._unacked = 0
        self._continued: tuple[int, int, bytearray] | None = None  # a header block's frames so far
        self._last_id = 2**31  # GOAWAY's last stream id
        self.connected = False  # the server's SETTINGS came: it speaks HTTP/2
        self.usable = True
        self.failure: RpcError | None = None
        self._write_failed = False  # the socket refused a write: read what the server said, send nothing
        self.closed = trio.Event()  # set once the socket is closed

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
            + frame(WINDOW_UPDATE, 0, 0, struct.pack(">L", CONNECTION_WINDOW - _DEFAULT_WINDOW))
        )
        trio.lowlevel.spawn_system_task(connection._read, name=f"grpc reader {authority.decode()}")
        trio.lowlevel.spawn_system_task(connection._write, name=f"grpc writer {authority.decode()}")
        return connection

    # -- calls --------------------------------------------------------------------------

    async def start(self, path: bytes, request: bytes, timeout: float | None, *, streaming: bool = False) -> Call:
        """Send a request: the call is in flight when this returns (or waits for flow
        control to send the rest of a large request)."""
        await trio.lowlevel.checkpoint_if_cancelled()  # past its deadline already: nothing goes out
        if len(request) > self.max_message:
            raise RpcError("RESOURCE_EXHAUSTED",
                           f"the request is {len(request)} bytes, above the {self.max_message} allowed",
                           connected=self.connected)
        while self.usable and len(self._calls) >= self._peer_max_streams:
            await self._window_lot.park()
        self._check_usable()
        headers = [
            (b":method", b"POST"), (b":scheme", b"http"), (b":path", path),
            (b":authority", self._authority), (b"content-type", b"application/grpc"),
            (b"te", b"trailers"), (b"user-agent", self._user_agent),
        ]
        if timeout is not None:
            headers.append((b"grpc-timeout", grpc_timeout(timeout)))
        call = Call(self.max_message, streaming)
        call.id = self._next_id
        self._next_id += 2
        if self._next_id > _LAST_STREAM_ID:  # ids run out: the next call goes to a new connection
            self.usable = False
        call.send_window = self._peer_window
        self._calls[call.id] = call
        self._push(self._header_frames(call.id, hpack.encode(headers)))
        body = len(request).to_bytes(5, "big") + request  # flag 0 (not compressed), length
        await self._send_data(call, body)
        return call

    async def wait(self, call: Call) -> None:
        """Until the call ended (a streaming call: or has a message). Cancelled: the server
        is told (RST_STREAM)."""
        if call.ended or call.streaming and call.messages:
            return
        try:
            await call.lot.park()
        except BaseException:
            self.cancel(call)
            raise

    def cancel(self, call: Call) -> None:
        if not call.ended and call.id in self._calls:
            call.cancelled = call.reset = True
            call.fail(RpcError("CANCELLED", "cancelled by the caller", connected=self.connected))
            self._push(frame(RST_STREAM, 0, call.id, struct.pack(">L", CANCEL)))
            self._forget(call)

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

    async def _send_data(self, call: Call, body: bytes) -> None:
        sent = 0
        while True:
            room = min(len(body) - sent, self._send_window, call.send_window, self._peer_max_frame)
            if room > 0 or sent == len(body):
                chunk = body[sent:sent + room]
                sent += room
                self._send_window -= room
                call.send_window -= room
                self._push(frame(DATA, END_STREAM if sent == len(body) else 0, call.id, chunk))
                if sent == len(body):
                    return
                continue
            if call.ended:  # answered, failed or reset meanwhile: its request stays unfinished
                if not call.reset:
                    call.reset = True
                    self._push(frame(RST_STREAM, 0, call.id, struct.pack(">L", CANCEL)))
                return
            try:
                await self._window_lot.park()
            except BaseException:
                self.cancel(call)
                raise

    # -- the writer -----------------------------------------------------------------------

    def _push(self, data: bytes) -> None:
        if self._socket.fileno() < 0 or self._write_failed:
            return  # failed or closed: nothing more goes out
        if self._outgoing:  # behind what the socket did not take yet, in order
            self._outgoing += data
            if len(self._outgoing) > _OUTGOING_LIMIT:
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

    # -- the reader -----------------------------------------------------------------------

    async def _read(self) -> None:
        try:
            while self._socket.fileno() >= 0:
                await trio.lowlevel.wait_readable(self._socket)
                try:
                    data = self._socket.recv(_RECEIVE)
                except BlockingIOError:
                    continue
                if not data:
                    raise ConnectionResetError("the server closed the connection")
                self._received += data
                self._take_frames()
        except _ConnectionError as error:
            self._push(frame(GOAWAY, 0, 0, struct.pack(">LL", 0, error.code) + error.details.encode()))
            self._fail(RpcError("UNAVAILABLE" if not self.connected else "INTERNAL", error.details,
                                connected=self.connected))
        except (OSError, trio.ClosedResourceError) as error:
            detail = str(error) if self.connected else f"the server closed the connection before answering ({error})"
            self._fail(RpcError("UNAVAILABLE", detail, connected=self.connected))
        except Exception as error:  # a bug here must not end the trio run (a system task)
            self._fail(RpcError("INTERNAL", f"the gRPC client's reader failed: {error!r}", connected=self.connected))
        finally:
            self._close_socket()  # nothing reads it any more

    def _take_frames(self) -> None:
        buffer = self._received
        position = 0
        size = len(buffer)
        try:
            if not self.connected and size >= 5 and buffer[:5] == b"HTTP/":
                raise _ConnectionError(PROTOCOL_ERROR, _HTTP1)
            while size - position >= 9:
                high, low, kind, flags, stream_id = _HEADER.unpack_from(buffer, position)
                length = high << 8 | low
                if length > MAX_FRAME:
                    raise _ConnectionError(FRAME_SIZE_ERROR, f"a frame of {length} bytes")
                end = position + 9 + length
                if end > size:
                    break
                payload = bytes(buffer[position + 9:end])
                position = end
                if not self.connected and kind != SETTINGS:
                    raise _ConnectionError(PROTOCOL_ERROR, "Failed parsing HTTP/2: the first frame is not SETTINGS")
                self._take_frame(kind, flags, stream_id & 0x7FFFFFFF, payload)
        finally:
            del buffer[:position]

    def _take_frame(self, kind: int, flags: int, stream_id: int, payload: bytes) -> None:
        if self._continued is not None and kind != CONTINUATION:
            raise _ConnectionError(PROTOCOL_ERROR, "a header block was interrupted")
        if kind == DATA:
            self._take_data(flags, stream_id, payload)
        elif kind == HEADERS:
            if flags & PADDED:
                payload = _unpad(payload)
            if flags & PRIORITY_FLAG:
                payload = payload[5:]
            if stream_id == 0:
                raise _ConnectionError(PROTOCOL_ERROR, "HEADERS on stream 0")
            if len(payload) > MAX_HEADER_BLOCK:
                raise _ConnectionError(COMPRESSION_ERROR, f"a header block over {MAX_HEADER_BLOCK} bytes")
            if flags & END_HEADERS:
                self._take_headers(stream_id, flags, payload)
            else:
                self._continued = (stream_id, flags, bytearray(payload))
        elif kind == CONTINUATION:
            if self._continued is None or self._continued[0] != stream_id:
                raise _ConnectionError(PROTOCOL_ERROR, "an unexpected CONTINUATION frame")
            self._continued[2].extend(payload)
            if len(self._continued[2]) > MAX_HEADER_BLOCK:
                raise _ConnectionError(COMPRESSION_ERROR, f"a header block over {MAX_HEADER_BLOCK} bytes")
            if flags & END_HEADERS:
                stream_id, first_flags, block = self._continued
                self._continued = None
                self._take_headers(stream_id, first_flags, bytes(block))
        elif kind == SETTINGS:
            if not flags & ACK:
                self._take_settings(payload)
        elif kind == WINDOW_UPDATE:
            increment = int.from_bytes(payload[:4], "big") & 0x7FFFFFFF
            if stream_id == 0:
                self._send_window += increment
            elif (call := self._calls.get(stream_id)) is not None:
                call.send_window += increment
            self._window_lot.unpark_all()
        elif kind == PING:
            if not flags & ACK:
                self._push(frame(PING, ACK, 0, payload))
        elif kind == RST_STREAM:
            call = self._calls.get(stream_id)
            if call is not None:
                call.reset = True
                error_code = int.from_bytes(payload[:4], "big")
                call.fail(RpcError(reset_code(error_code), f"the server reset the stream (HTTP/2 error {error_code})",
                                   connected=True, retryable=error_code == REFUSED_STREAM))
                self._forget(call)
        elif kind == GOAWAY:
            self._take_goaway(payload)
        elif kind == PUSH_PROMISE:
            raise _ConnectionError(PROTOCOL_ERROR, "PUSH_PROMISE after push was disabled")
        # PRIORITY and unknown frame types are ignored (RFC 9113 4.1, 5.5).

    def _take_settings(self, payload: bytes) -> None:
        if len(payload) % 6:
            raise _ConnectionError(FRAME_SIZE_ERROR, "a SETTINGS frame whose length is not a multiple of 6")
        for offset in range(0, len(payload), 6):
            key, value = struct.unpack_from(">HL", payload, offset)
            if key == INITIAL_WINDOW_SIZE and value > _LAST_STREAM_ID:
                raise _ConnectionError(FLOW_CONTROL_ERROR, f"SETTINGS_INITIAL_WINDOW_SIZE {value}")
            if key == MAX_FRAME_SIZE and not 16384 <= value < 1 << 24:
                raise _ConnectionError(PROTOCOL_ERROR, f"SETTINGS_MAX_FRAME_SIZE {value}")
            if key == INITIAL_WINDOW_SIZE:
                delta = value - self._peer_window
                self._peer_window = value
                for call in self._calls.values():
                    call.send_window += delta
            elif key == MAX_FRAME_SIZE:
                self._peer_max_frame = value
            elif key == MAX_CONCURRENT_STREAMS:
                self._peer_max_streams = value
        self.connected = True
        self._push(frame(SETTINGS, ACK, 0))
        self._window_lot.unpark_all()

    def _take_data(self, flags: int, stream_id: int, payload: bytes) -> None:
        self._unacked += len(payload)  # padding counts toward flow control too
        if self._unacked >= CONNECTION_WINDOW // 2:
            self._push(frame(WINDOW_UPDATE, 0, 0, struct.pack(">L", self._unacked)))
            self._unacked = 0
        call = self._calls.get(stream_id)
        if call is None:
            return  # a call cancelled or reset meanwhile
        counted = len(payload)
        if flags & PADDED:
            payload = _unpad(payload)
        try:
            call.take_data(payload)
        except _TooLarge as large:
            self._reset(call, RpcError("RESOURCE_EXHAUSTED",
                                       f"the answer is {large.length} bytes, above the {call.max_message} allowed",
                                       connected=True))
            return
        except _Compressed:
            self._reset(call, RpcError("INTERNAL", "a compressed message, which was not asked for", connected=True))
            return
        except _TooMany:
            self._reset(call, RpcError("INTERNAL", "a unary call answered with more than one message", connected=True))
            return
        if flags & END_STREAM:
            self._finish(call, "INTERNAL", "the server ended the stream without a status")
            return
        if call.streaming:
            # Padding gets its window back now, messages when the caller takes them
            # (take_message); what is held back never leaves less than one largest
            # message of window (_window_threshold).
            call.unacked += counted - len(payload)
            self._return_window(call)
            if call.messages:
                call.lot.unpark_all()

    def _take_headers(self, stream_id: int, flags: int, block: bytes) -> None:
        try:
            headers = self._decoder.decode(block)  # always: the table must follow the server's
        except hpack.HpackError as error:
            raise _ConnectionError(COMPRESSION_ERROR, f"a header block: {error}") from None
        call = self._calls.get(stream_id)
        if call is None:
            return
        fields = dict(headers)
        if not call.headers:
            try:
                call.http_status = int(fields.get(b":status", b"0"))
            except ValueError:
                call.http_status = 0
            if 100 <= call.http_status < 200 and not flags & END_STREAM:
                return  # an interim answer: the real headers follow
            call.headers = True
            if not flags & END_STREAM:
                if call.http_status != 200:
                    self._reset(call, RpcError(http_code(call.http_status),
                                               f"the server answered HTTP status {call.http_status}", connected=True))
                elif not fields.get(b"content-type", b"").startswith(b"application/grpc"):
                    kind = fields.get(b"content-type", b"").decode("latin-1") or "none"
                    self._reset(call, RpcError("UNKNOWN", f"the server answered content-type {kind}, not gRPC",
                                               connected=True))
                return
        elif not flags & END_STREAM:
            self._reset(call, RpcError("INTERNAL", "trailers without END_STREAM", connected=True))
            return
        status = fields.get(b"grpc-status")
        if status is None:
            if call.http_status != 200:
                self._finish(call, http_code(call.http_status), f"the server answered HTTP status {call.http_status}")
            else:
                self._finish(call, "INTERNAL", "the server ended the stream without grpc-status")
            return
        self._finish(call, code_name(status), message(fields.get(b"grpc-message", b"")))

    def _take_goaway(self, payload: bytes) -> None:
        last_id = int.from_bytes(payload[:4], "big") & 0x7FFFFFFF
        error_code = int.from_bytes(payload[4:8], "big")
        self._last_id = min(self._last_id, last_id)
        self.usable = False  # new calls go to a new connection
        detail = f"the server is closing the connection (GOAWAY, HTTP/2 error {error_code})"
        self.failure = RpcError("UNAVAILABLE", detail, connected=True, retryable=True)
        for call_id in [i for i in self._calls if i > last_id]:  # never processed: safe to try again
            self._calls.pop(call_id).fail(RpcError("UNAVAILABLE", detail, connected=True, retryable=True))
        self._window_lot.unpark_all()
        if not self._calls:
            self._close_socket()

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
        self.closed.set()

    def __iter__(self) -> Iterator[Call]:  # the calls in flight (tests)
        return iter(list(self._calls.values()))


def _close(sock: socket.socket) -> None:
    trio.lowlevel.notify_closing(sock)  # the reader and the writer wake with ClosedResourceError
    sock.close()


def _unpad(payload: bytes) -> bytes:
    if not payload:
        raise _ConnectionError(PROTOCOL_ERROR, "a padded frame without its pad length")
    pad = payload[0]
    if pad >= len(payload):
        raise _ConnectionError(PROTOCOL_ERROR, "padding longer than the frame")
    return payload[1:len(payload) - pad]
