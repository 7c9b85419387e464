"""A minimal WebSocket client for the Kubernetes channel protocols (v4.channel.k8s.io:
channel 0 stdin, 1 stdout, 2 stderr, 3 the status as JSON), over TCP or TLS, for tests of
exec, attach and port-forward through the kubelet and the runtime's streaming server."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import ssl
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

import trio

_WEBSOCKET_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


class WebSocket:
    def __init__(self, stream: trio.abc.Stream, head: bytes, buffered: bytes) -> None:
        self.stream = stream
        self.head = head
        self._buffer = bytearray(buffered)

    @property
    def status_line(self) -> str:
        return self.head.split(b"\r\n", 1)[0].decode()

    async def send(self, channel: int, data: bytes) -> None:
        await self.stream.send_all(_client_frame(bytes([channel]) + data))

    async def receive(self) -> tuple[int, bytes] | None:
        """The next (channel, data) message, or None once the server closed."""
        message = bytearray()
        while True:
            frame = await self._frame()
            if frame is None:
                return None
            fin, opcode, payload = frame
            if opcode == 0x8:
                return None
            if opcode in (0x9, 0xA):
                continue  # ping/pong: nothing the channel protocol uses
            message += payload
            if fin:
                return message[0], bytes(message[1:])

    async def read_to_end(self) -> bytes:
        """The raw bytes after the response head, until the server closes."""
        while await self._fill(len(self._buffer) + 1):
            pass
        return bytes(self._buffer)

    async def channels(self) -> dict[int, bytes]:
        """Every message until the server closes, joined per channel."""
        joined: dict[int, bytes] = {}
        while (message := await self.receive()) is not None:
            channel, data = message
            joined[channel] = joined.get(channel, b"") + data
        return joined

    async def _frame(self) -> tuple[bool, int, bytes] | None:
        if not await self._fill(2):
            return None
        first, second = self._buffer[0], self._buffer[1]
        length, offset = second & 0x7F, 2
        if length == 126:
            await self._fill(4)
            length, offset = int.from_bytes(self._buffer[2:4], "big"), 4
        elif length == 127:
            await self._fill(10)
            length, offset = int.from_bytes(self._buffer[2:10], "big"), 10
        assert not second & 0x80, "a server's frames are not masked"
        await self._fill(offset + length)
        payload = bytes(self._buffer[offset:offset + length])
        del self._buffer[:offset + length]
        return bool(first & 0x80), first & 0x0F, payload

    async def _fill(self, size: int) -> bool:
        while len(self._buffer) < size:
            data = await self.stream.receive_some(65536)
            if not data:
                return False
            self._buffer += data
        return True


def _client_frame(payload: bytes, opcode: int = 0x2) -> bytes:
    mask = os.urandom(4)
    size = len(payload)
    if size < 126:
        header = bytes([0x80 | opcode, 0x80 | size])
    elif size < 1 << 16:
        header = bytes([0x80 | opcode, 0x80 | 126]) + size.to_bytes(2, "big")
    else:
        header = bytes([0x80 | opcode, 0x80 | 127]) + size.to_bytes(8, "big")
    masked = bytes(byte ^ mask[i % 4] for i, byte in enumerate(payload))
    return header + mask + masked


@asynccontextmanager
async def websocket(
    port: int, path: str, protocol: str = "v4.channel.k8s.io", *,
    ssl_context: ssl.SSLContext | None = None, headers: Sequence[tuple[str, str]] = (),
) -> AsyncIterator[WebSocket]:
    """Open `path` on 127.0.0.1:`port` (over TLS with `ssl_context`) as a WebSocket."""
    stream: trio.abc.Stream = await trio.open_tcp_stream("127.0.0.1", port)
    if ssl_context is not None:
        stream = trio.SSLStream(stream, ssl_context, server_hostname="127.0.0.1")
    try:
        key = base64.b64encode(os.urandom(16))
        extra = "".join(f"{name}: {value}\r\n" for name, value in headers)
        await stream.send_all(
            f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: Upgrade\r\n"
            f"Upgrade: websocket\r\nSec-WebSocket-Version: 13\r\n{extra}".encode()
            + b"Sec-WebSocket-Key: " + key + b"\r\n"
            + f"Sec-WebSocket-Protocol: {protocol}\r\n\r\n".encode()
        )
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = await stream.receive_some(65536)
            if not chunk:
                break
            data += chunk
        head, _, rest = data.partition(b"\r\n\r\n")
        ws = WebSocket(stream, head + b"\r\n\r\n", rest)
        if ws.status_line.split()[1:2] == ["101"]:
            accept = base64.b64encode(hashlib.sha1(key + _WEBSOCKET_GUID).digest())
            assert b"Sec-WebSocket-Accept: " + accept in head
        yield ws
    finally:
        await trio.aclose_forcefully(stream)


def exit_code(status: bytes) -> int:
    """The exit code in a v4 status message (Success is 0)."""
    decoded = json.loads(status)
    if decoded["status"] == "Success":
        return 0
    assert decoded["reason"] == "NonZeroExitCode", decoded
    (cause,) = [c for c in decoded["details"]["causes"] if c["reason"] == "ExitCode"]
    return int(cause["message"])
