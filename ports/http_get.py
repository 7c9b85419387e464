"""One HTTP/1.1 GET on a connection of its own: what an httpGet probe sends, on its hot path.

The Go prober opens a connection per probe (keep-alive off), skips TLS verification and
reads at most 10 KiB of a body. This does the same over a trio socket and nothing more:
no pool, no proxy, no name resolution (the probers only ever give it IP literals), no
cookies. httpx with its default transport did it too, at 1.8 ms of CPU per probe where
this takes about 0.2 ms (bench/probes.py, 110 pods probed every second).

The URL and headers of a probe never change, so the request bytes are built once per
(URL, headers) and cached. The response's head is parsed for what a probe judges by (the
status code and Location); its body is read only for a 3xx, the one answer whose body a
probe reports.
"""

from __future__ import annotations

import errno
import functools
import math
import os
import re
import socket
import ssl
import struct
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

import trio

if TYPE_CHECKING:
    import httpx

READ_SIZE = 16 * 1024
MAX_HEAD = 64 * 1024  # a response head longer than this is refused


class HttpGetError(Exception):
    """The GET got no usable answer: refused, reset, TLS failed, not HTTP. The message says
    what happened, in the words Go's client would use where it can."""


class DialError(HttpGetError):
    """No TCP connection: "dial tcp <address>: connect: <reason>", as Go's dialer says it."""


class DialTimeout(DialError):
    """No TCP connection within the dial's timeout."""


# Go's probe dialer (pkg/probe/dialer_others.go) sets SO_LINGER {on, 1 s} on every
# httpGet, tcpSocket and grpc probe connection (kubernetes#89898, #115143): 1 s and not 0,
# so that a probe's connection ends with a FIN, not a RST. pykubelet sets the same.
PROBE_LINGER = struct.pack("ii", 1, 1)
_NO_LINGER = struct.pack("ii", 0, 0)
# The first byte of Linux's struct tcp_info is the connection's state (include/net/tcp_states.h).
_ESTABLISHED = 1
_FIN_NOT_ACKED = frozenset({4, 9, 11})  # FIN_WAIT1, LAST_ACK, CLOSING


async def dial_tcp(host: str, port: int, timeout: float = math.inf) -> socket.socket:
    """open_tcp's socket, for a caller that closes it with close_socket(sock)."""
    sock, _ = await open_tcp(host, port, timeout)
    return sock


async def open_tcp(host: str, port: int, timeout: float = math.inf) -> tuple[socket.socket, bool]:
    """A TCP connection to an IP literal, as a connected non-blocking socket carrying Go's
    probe linger (close it with close_socket). The bare socket, without
    trio.open_tcp_stream's nursery, name resolution and stream wrapping: what an httpGet or
    tcpSocket probe needs. A connection to a local peer is made within the connect call
    (the kernel runs the peer's side of the handshake there), and is then returned without
    waking trio's loop; otherwise it waits for the connect, up to `timeout` seconds.
    Returns the socket and whether trio waited on it (close_socket needs to know).
    Raises DialError (DialTimeout past the timeout); a cancel closes the socket."""
    await trio.lowlevel.checkpoint_if_cancelled()
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        sock = socket.socket(family, socket.SOCK_STREAM)
    except OSError as error:
        raise DialError(f"dial tcp {host_port(host, port)}: socket: {_reason(error)}") from error
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, PROBE_LINGER)
        sock.setblocking(False)
        try:
            error = sock.connect_ex((host, port))
        except OSError as exc:  # an address connect cannot use (an unknown IPv6 zone)
            raise DialError(f"dial tcp {host_port(host, port)}: connect: {_reason(exc)}") from exc
        if error == errno.EINPROGRESS:
            if sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 1)[0] == _ESTABLISHED:
                return sock, False
            with trio.move_on_after(timeout):
                await trio.lowlevel.wait_writable(sock)
                error = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if error == errno.EINPROGRESS:
                raise DialTimeout(f"dial tcp {host_port(host, port)}: i/o timeout after {timeout:g}s")
            waited = True
        else:
            waited = False
        if error:
            raise DialError(f"dial tcp {host_port(host, port)}: connect: {os.strerror(error).lower()}")
    except BaseException:
        close_socket(sock)
        raise
    return sock, waited


def host_port(host: str, port: int) -> str:
    """host:port, an IPv6 literal in brackets (Go: net.JoinHostPort)."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def close_socket(sock: socket.socket, waited: bool = True) -> None:
    """Close a probe's socket without blocking the loop. Unless trio never `waited` on it,
    tell trio first (its bookkeeping of the fd; for one it never saw, that costs a failing
    epoll_ctl and an exception per probe)."""
    if waited:
        trio.lowlevel.notify_closing(sock)
    finish_socket(sock)
    sock.close()


def finish_socket(sock: socket.socket) -> None:
    """Send our FIN, and drop the linger if the peer has not acknowledged it yet.

    With SO_LINGER on, Linux's close() waits, even on a non-blocking socket, until the
    peer acknowledges the FIN, up to the linger time: a wait that would stall every task
    of the daemon. A local peer's acknowledgement is processed before shutdown() returns,
    so close() then has nothing to wait for; for a slow peer the linger goes first, which
    changes nothing on the wire (Linux sends the same FIN either way)."""
    try:
        sock.shutdown(socket.SHUT_WR)
        if sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 1)[0] in _FIN_NOT_ACKED:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _NO_LINGER)
    except OSError:
        pass  # never connected, or reset: there is no FIN to wait for


class HttpAnswer(NamedTuple):
    status: int
    location: str  # the Location header, "" if none
    body: bytes  # only for a 3xx, at most max_body bytes


@dataclass(frozen=True)
class _Target:
    host: str
    port: int
    tls: bool
    request: bytes


_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_BAD_VALUE = re.compile(r"[\x00\r\n]")


@functools.lru_cache(maxsize=4096)
def _target(url: str, headers: tuple[tuple[str, str], ...]) -> _Target:
    import httpx  # loaded by the first httpGet probe (ports/probers.py)

    parsed = httpx.URL(url)
    if parsed.scheme not in ("http", "https"):
        raise HttpGetError(f'unsupported protocol scheme "{parsed.scheme}"')
    tls = parsed.scheme == "https"
    lines = [f"GET {parsed.raw_path.decode('ascii')} HTTP/1.1"]
    if not any(name.lower() == "host" for name, _ in headers):
        lines.append(f"Host: {parsed.netloc.decode('ascii')}")
    for name, value in headers:
        if not _TOKEN.fullmatch(name):
            raise HttpGetError(f"net/http: invalid header field name {name!r}")
        if _BAD_VALUE.search(value):
            raise HttpGetError(f"net/http: invalid header field value for {name!r}")
        lines.append(f"{name}: {value}")
    request = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
    return _Target(parsed.host, parsed.port or (443 if tls else 80), tls, request)


@functools.cache  # one per process
def _tls_context() -> ssl.SSLContext:
    """No verification, as Go's prober (InsecureSkipVerify): so no CA store either (the
    system's would cost about 1 MB of the daemon's memory for nothing)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # TLS 1.2 at least, as Go's client
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


async def http_get(url: httpx.URL, headers: tuple[tuple[str, str], ...], max_body: int) -> HttpAnswer:
    """GET `url` (its host an IP literal) with exactly `headers` (plus Host unless given),
    on a new connection that is closed after the answer. Raises HttpGetError."""
    target = _target(str(url), headers)
    connection = await _Connection.open(target)
    try:
        await connection.send_all(target.request)
        return await _Reader(connection).answer(max_body)
    finally:
        await connection.close()


class _Connection:
    """A non-blocking socket driven with trio's wait_readable/wait_writable, or TLS over
    it. The plain case skips trio.socket: its address resolution and per-call wrapping
    cost a probe more than the exchange itself."""

    def __init__(self, sock: socket.socket, tls: trio.SSLStream | None = None) -> None:
        self.sock = sock
        self.tls = tls

    @classmethod
    async def open(cls, target: _Target) -> _Connection:
        sock = await dial_tcp(target.host, target.port)
        if not target.tls:
            return cls(sock)
        tls = trio.SSLStream(trio.SocketStream(trio.socket.from_stdlib_socket(sock)), _tls_context(), server_hostname=None)
        try:
            await tls.do_handshake()
        except (trio.BrokenResourceError, ssl.SSLError) as error:
            await trio.aclose_forcefully(tls)
            raise HttpGetError(
                f"TLS handshake with {host_port(target.host, target.port)}: {error.__cause__ or error}"
            ) from error
        except BaseException:
            await trio.aclose_forcefully(tls)
            raise
        return cls(sock, tls)

    async def send_all(self, data: bytes) -> None:
        try:
            if self.tls is not None:
                await self.tls.send_all(data)
                return
            view = memoryview(data)
            while view:
                try:
                    view = view[self.sock.send(view):]
                except BlockingIOError:
                    await trio.lowlevel.wait_writable(self.sock)
        except (trio.BrokenResourceError, OSError) as error:
            raise HttpGetError(f"write: {_reason(error.__cause__ or error)}") from error

    async def receive_some(self, size: int) -> bytes:
        try:
            if self.tls is not None:
                return await self.tls.receive_some(size)
            while True:
                try:
                    return self.sock.recv(size)
                except BlockingIOError:
                    await trio.lowlevel.wait_readable(self.sock)
        except (trio.BrokenResourceError, OSError) as error:
            raise HttpGetError(f"read: {_reason(error.__cause__ or error)}") from error

    async def close(self) -> None:
        if self.tls is not None:
            finish_socket(self.sock)
            await trio.aclose_forcefully(self.tls)
        else:
            close_socket(self.sock)


def _reason(error: BaseException) -> str:
    if isinstance(error, OSError) and error.errno:
        return os.strerror(error.errno).lower()
    return str(error) or type(error).__name__


class _Reader:
    """Reads one response from a connection: head, then (for a 3xx) some of the body."""

    def __init__(self, connection: _Connection) -> None:
        self.connection = connection
        self.buffer = bytearray()
        self.eof = False

    async def _fill(self) -> bool:
        """Read more into the buffer; False at the end of the stream."""
        if self.eof:
            return False
        data = await self.connection.receive_some(READ_SIZE)
        if not data:
            self.eof = True
            return False
        self.buffer += data
        return True

    async def _head(self) -> bytes:
        while True:
            end = self.buffer.find(b"\r\n\r\n")
            if end >= 0:
                head, self.buffer = bytes(self.buffer[:end]), self.buffer[end + 4:]
                return head
            if len(self.buffer) > MAX_HEAD:
                raise HttpGetError(f"net/http: server response headers exceeded {MAX_HEAD} bytes")
            if not await self._fill():
                if not self.buffer:
                    raise HttpGetError("EOF: the server closed the connection without an answer")
                raise HttpGetError("malformed HTTP response: the connection closed inside its head")

    async def answer(self, max_body: int) -> HttpAnswer:
        while True:
            head = await self._head()
            status, fields = _parse_head(head)
            if 100 <= status < 200 and status != 101:
                continue  # informational: the final answer follows
            break
        if not 300 <= status < 400:
            return HttpAnswer(status, fields.get("location", ""), b"")
        if "chunked" in fields.get("transfer-encoding", "").lower():
            body = await self._chunked(max_body)
        else:
            length = fields.get("content-length")
            body = await self._plain(min(int(length), max_body) if length and length.isdigit() else max_body)
        return HttpAnswer(status, fields.get("location", ""), body)

    async def _plain(self, limit: int) -> bytes:
        while len(self.buffer) < limit and await self._fill():
            pass
        return bytes(self.buffer[:limit])

    async def _chunked(self, limit: int) -> bytes:
        body = bytearray()
        while len(body) < limit:
            while (end := self.buffer.find(b"\r\n")) < 0:
                if not await self._fill():
                    return bytes(body)  # cut short: what came is what there is
            size_text = bytes(self.buffer[:end]).split(b";", 1)[0].strip()
            try:
                size = int(size_text, 16)
            except ValueError:
                raise HttpGetError(f"malformed chunked encoding: chunk size {size_text[:20]!r}") from None
            del self.buffer[: end + 2]
            if size == 0:
                break
            while len(self.buffer) < size + 2 and await self._fill():
                pass
            body += self.buffer[:size]
            del self.buffer[: size + 2]
        return bytes(body[:limit])


def _parse_head(head: bytes) -> tuple[int, dict[str, str]]:
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not (len(parts[1]) == 3 and parts[1].isdigit()):
        raise HttpGetError(f"malformed HTTP response {lines[0][:40]!r}")
    fields: dict[str, str] = {}
    for line in lines[1:]:
        name, colon, value = line.partition(":")
        if colon:
            fields[name.strip().lower()] = value.strip()
    return int(parts[1]), fields
