"""What the server sends on a connection: the reader task, and each frame's effect on the
calls in flight (their answers, the windows, SETTINGS, PING, RST_STREAM, GOAWAY). A mixin
of Connection (connection.py), which owns the state it reads and the calls it ends."""

from __future__ import annotations

import struct

import trio

from . import hpack
from .call import CompressedMessage, MessageTooLarge, TooManyMessages
from .frames import (
    ACK, COMPRESSION_ERROR, CONNECTION_WINDOW, CONTINUATION, DATA, END_HEADERS, END_STREAM, FLOW_CONTROL_ERROR,
    FRAME_SIZE_ERROR, GOAWAY, HEADER, HEADERS, HTTP1, INITIAL_WINDOW_SIZE, LAST_STREAM_ID, MAX_CONCURRENT_STREAMS,
    MAX_FRAME, MAX_FRAME_SIZE, MAX_HEADER_BLOCK, PADDED, PING, PRIORITY_FLAG, PROTOCOL_ERROR, PUSH_PROMISE,
    RECEIVE, REFUSED_STREAM, RST_STREAM, SETTINGS, WINDOW_UPDATE, ProtocolError, frame, unpad,
)
from .status import RpcError, code_name, http_code, message, reset_code


class IncomingFrames:
    async def _read(self) -> None:
        try:
            while self._socket.fileno() >= 0:
                await trio.lowlevel.wait_readable(self._socket)
                try:
                    data = self._socket.recv(RECEIVE)
                except BlockingIOError:
                    continue
                if not data:
                    raise ConnectionResetError("the server closed the connection")
                self._received += data
                self._take_frames()
        except ProtocolError as error:
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
                raise ProtocolError(PROTOCOL_ERROR, HTTP1)
            while size - position >= 9:
                high, low, kind, flags, stream_id = HEADER.unpack_from(buffer, position)
                length = high << 8 | low
                if length > MAX_FRAME:
                    raise ProtocolError(FRAME_SIZE_ERROR, f"a frame of {length} bytes")
                end = position + 9 + length
                if end > size:
                    break
                payload = bytes(buffer[position + 9:end])
                position = end
                if not self.connected and kind != SETTINGS:
                    raise ProtocolError(PROTOCOL_ERROR, "Failed parsing HTTP/2: the first frame is not SETTINGS")
                self._take_frame(kind, flags, stream_id & 0x7FFFFFFF, payload)
        finally:
            del buffer[:position]

    def _take_frame(self, kind: int, flags: int, stream_id: int, payload: bytes) -> None:
        if self._continued is not None and kind != CONTINUATION:
            raise ProtocolError(PROTOCOL_ERROR, "a header block was interrupted")
        if kind == DATA:
            self._take_data(flags, stream_id, payload)
        elif kind == HEADERS:
            if flags & PADDED:
                payload = unpad(payload)
            if flags & PRIORITY_FLAG:
                payload = payload[5:]
            if stream_id == 0:
                raise ProtocolError(PROTOCOL_ERROR, "HEADERS on stream 0")
            if len(payload) > MAX_HEADER_BLOCK:
                raise ProtocolError(COMPRESSION_ERROR, f"a header block over {MAX_HEADER_BLOCK} bytes")
            if flags & END_HEADERS:
                self._take_headers(stream_id, flags, payload)
            else:
                self._continued = (stream_id, flags, bytearray(payload))
        elif kind == CONTINUATION:
            if self._continued is None or self._continued[0] != stream_id:
                raise ProtocolError(PROTOCOL_ERROR, "an unexpected CONTINUATION frame")
            self._continued[2].extend(payload)
            if len(self._continued[2]) > MAX_HEADER_BLOCK:
                raise ProtocolError(COMPRESSION_ERROR, f"a header block over {MAX_HEADER_BLOCK} bytes")
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
            if self._window_lot:  # (one comes with nearly every call: see _forget)
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
            raise ProtocolError(PROTOCOL_ERROR, "PUSH_PROMISE after push was disabled")
        # PRIORITY and unknown frame types are ignored (RFC 9113 4.1, 5.5).

    def _take_settings(self, payload: bytes) -> None:
        if len(payload) % 6:
            raise ProtocolError(FRAME_SIZE_ERROR, "a SETTINGS frame whose length is not a multiple of 6")
        for offset in range(0, len(payload), 6):
            key, value = struct.unpack_from(">HL", payload, offset)
            if key == INITIAL_WINDOW_SIZE and value > LAST_STREAM_ID:
                raise ProtocolError(FLOW_CONTROL_ERROR, f"SETTINGS_INITIAL_WINDOW_SIZE {value}")
            if key == MAX_FRAME_SIZE and not 16384 <= value < 1 << 24:
                raise ProtocolError(PROTOCOL_ERROR, f"SETTINGS_MAX_FRAME_SIZE {value}")
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
            payload = unpad(payload)
        try:
            call.take_data(payload)
        except MessageTooLarge as large:
            self._reset(call, RpcError("RESOURCE_EXHAUSTED",
                                       f"the answer is {large.length} bytes, above the {call.max_message} allowed",
                                       connected=True))
            return
        except CompressedMessage:
            self._reset(call, RpcError("INTERNAL", "a compressed message, which was not asked for", connected=True))
            return
        except TooManyMessages:
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
                call.wake()

    def _take_headers(self, stream_id: int, flags: int, block: bytes) -> None:
        try:
            headers = self._decoder.decode(block)  # always: the table must follow the server's
        except hpack.HpackError as error:
            raise ProtocolError(COMPRESSION_ERROR, f"a header block: {error}") from None
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
        self.usable = False  # new calls go to a new connection
        detail = f"the server is closing the connection (GOAWAY, HTTP/2 error {error_code})"
        self.failure = RpcError("UNAVAILABLE", detail, connected=True, retryable=True)
        for call_id in [i for i in self._calls if i > last_id]:  # never processed: safe to try again
            self._calls.pop(call_id).fail(RpcError("UNAVAILABLE", detail, connected=True, retryable=True))
        self._window_lot.unpark_all()
        if not self._calls:
            self._close_socket()
