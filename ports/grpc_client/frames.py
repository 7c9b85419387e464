"""HTTP/2's wire for a gRPC client (RFC 9113): frame types, flags, settings and error
codes, how a frame is written, gRPC's timeout header, and the error that ends a
connection when the server breaks the protocol."""

from __future__ import annotations

import math
import struct

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
DEFAULT_WINDOW = 65535  # RFC 9113 6.9.2
HEADER = struct.Struct(">HBBBL")  # length (24 bits, as 16 + 8), type, flags, stream id
# What one recv() takes at most. Kept under glibc's mmap threshold (128 KiB): Python
# allocates the whole size before the read, and a larger one is a fresh mmap, mremap and
# munmap on every read (11 us more a read here, warm: docs/performance.md), where a list
# answer of 500 pods only takes a few more reads of 64 KiB.
RECEIVE = 1 << 16
MAX_HEADER_BLOCK = 1 << 16  # a header block longer than this ends the connection (grpc's metadata is 8-16 KiB)
OUTGOING_LIMIT = 1 << 26  # bytes waiting for a server that does not read: past it, the connection fails
LAST_STREAM_ID = 2**31 - 1
HTTP1 = "Trying to connect an http1.x server: it answered HTTP/1.x"


def frame(kind: int, flags: int, stream_id: int, payload: bytes = b"") -> bytes:
    length = len(payload)
    return HEADER.pack(length >> 8, length & 0xFF, kind, flags, stream_id) + payload


def grpc_timeout(seconds: float) -> bytes:
    """A grpc-timeout header value: at most 8 digits and a unit (gRPC's PROTOCOL-HTTP2.md)."""
    milliseconds = max(1, math.ceil(seconds * 1000))
    if milliseconds < 10**8:
        return b"%dm" % milliseconds
    return b"%dS" % min(math.ceil(seconds), 10**8 - 1)


class ProtocolError(Exception):
    """The server broke HTTP/2: the connection ends with GOAWAY and this code."""

    def __init__(self, code: int, details: str) -> None:
        super().__init__(details)
        self.code = code
        self.details = details


def unpad(payload: bytes) -> bytes:
    if not payload:
        raise ProtocolError(PROTOCOL_ERROR, "a padded frame without its pad length")
    pad = payload[0]
    if pad >= len(payload):
        raise ProtocolError(PROTOCOL_ERROR, "padding longer than the frame")
    return payload[1:len(payload) - pad]
