"""The HTTP server of the healthz port, the admin socket and the kubelet API
(actors/server/http.py), fed random request bytes over TCP on 127.0.0.1: every request
gets a well-formed answer, a 4xx for one it cannot parse, and the server keeps serving."""

from __future__ import annotations

import re
import socket
import threading

import pytest
import trio
from hypothesis import example, given, strategies as st

from pykubelet.actors.health import HealthBoard
from pykubelet.actors.server.http import MAX_BODY, Request, Response, open_tcp, serve_listeners
from pykubelet.actors.server.routes import healthz_routes
from pykubelet.pods.container_logs import LogOptionsError, parse_log_options

from .support import tried, valid

TIMEOUT = 5.0  # a hang fails the example: no answer within it
_STATUS = re.compile(rb"HTTP/1\.1 (\d{3}) ")


async def _handler(request: Request) -> Response:
    """Routes as the servers have them: /healthz, /containerLogs's query, a streamed body."""
    if request.path.startswith("/containerLogs/"):
        try:
            parse_log_options(request.query)
        except LogOptionsError as error:
            return Response.text(error.status, f"{error}\n")

        async def produce(send) -> None:
            await send(b"line 1\n")
            await send(b"line 2\n")

        return Response(200, stream=produce)
    return await _healthz(request)


_healthz = healthz_routes(HealthBoard())


class _Server:
    def __init__(self) -> None:
        self.port: int | None = None
        self.crash: BaseException | None = None
        self._ready = threading.Event()
        self._token: trio.lowlevel.TrioToken | None = None
        self._cancel: trio.CancelScope | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        async def main() -> None:
            self._token = trio.lowlevel.current_trio_token()
            with trio.CancelScope() as self._cancel:
                listeners = await open_tcp("127.0.0.1", 0)
                self.port = listeners[0].socket.getsockname()[1]
                self._ready.set()
                await serve_listeners(listeners, _handler)

        try:
            trio.run(main)
        except BaseException as exc:  # noqa: BLE001 -- reported by the test that sees it
            self.crash = exc
            self._ready.set()

    def start(self) -> None:
        self._thread.start()
        self._ready.wait(10)

    def stop(self) -> None:
        if self._token is not None and self._cancel is not None and self.crash is None:
            trio.from_thread.run_sync(self._cancel.cancel, trio_token=self._token)
        self._thread.join(10)


_SERVER = _Server()


@pytest.fixture(scope="module", autouse=True)
def _server():
    _SERVER.start()
    yield
    _SERVER.stop()


def _exchange(data: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", _SERVER.port), timeout=TIMEOUT) as sock:
        try:
            sock.sendall(data)
            sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass  # the server answered (431, 413) and closed before reading it all
        out = b""
        try:
            while chunk := sock.recv(65536):
                out += chunk
        except ConnectionResetError:
            pass
        return out


def _serve(data: bytes) -> list[int]:
    """Send `data`; the statuses answered. Then check the server still answers /healthz."""
    tried("http server")
    answer = _exchange(data)
    assert _SERVER.crash is None, _SERVER.crash
    statuses = [int(m.group(1)) for m in _STATUS.finditer(answer)]
    if answer:
        assert _STATUS.match(answer), answer[:200]
    else:
        assert not data.strip(), "no answer to a request"
    # 501 is h11's (and Go's) answer to a Transfer-Encoding it does not know; 500 would be a route crashing
    assert all(status < 500 or status == 501 for status in statuses), answer[:300]
    healthz = _exchange(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    assert healthz.startswith(b"HTTP/1.1 200 ") and healthz.endswith(b"ok"), healthz[:200]
    if statuses and all(s < 400 for s in statuses):
        valid("http server")
    return statuses


methods = st.sampled_from([b"GET", b"HEAD", b"POST", b"PUT", b"DELETE", b"OPTIONS", b"CONNECT", b"PRI", b"G ET", b"", b"get"]) | st.from_regex(rb"[A-Z]{1,8}", fullmatch=True)
targets = st.one_of(
    st.sampled_from([b"/healthz", b"/healthz?verbose", b"/nope", b"*", b"//[", b"/[::1", b"http://x/healthz", b"/%zz?%%=&&==",
                     b"/containerLogs/ns/pod/c?tailLines=x", b"/containerLogs/ns/pod/c?sinceTime=0000-01-01T00:00:00Z&follow",
                     b"/containerLogs/ns/pod/c?limitBytes=0&sinceSeconds=-1", b"/containerLogs/ns/pod/c?timestamps", b"/" + b"a" * 17000]),
    st.text(max_size=30).map(lambda t: ("/" + t).encode("utf-8")),
)
versions = st.sampled_from([b"HTTP/1.1", b"HTTP/1.0", b"HTTP/2.0", b"HTTP/1.1x", b"", b"http/1.1"])
header_lines = st.one_of(
    st.sampled_from([b"Host: x", b"Content-Length: 5", b"Content-Length: -1", b"Content-Length: 99999999999999999999",
                     b"Content-Length: 0", b"Content-Length: 3, 4", b"Transfer-Encoding: chunked", b"Transfer-Encoding: gzip",
                     b"Connection: close", b"Connection: upgrade", b"Upgrade: websocket", b"Expect: 100-continue",
                     b"X-Long: " + b"v" * 20000, b"Bad Header: x", b": empty", b"NoColon", b" folded", b"Host: \x00"]),
    st.tuples(st.from_regex(rb"[A-Za-z-]{1,10}", fullmatch=True), st.binary(max_size=20)).map(lambda t: t[0] + b": " + t[1].replace(b"\n", b"")),
)
bodies = st.one_of(
    st.binary(max_size=100),
    st.sampled_from([b"5\r\nhello\r\n0\r\n\r\n", b"zz\r\nbad\r\n", b"5\r\nhel", b"0\r\n\r\n"]),
)


@st.composite
def requests(draw) -> bytes:
    line = b" ".join(x for x in (draw(methods), draw(targets), draw(versions)) if x or draw(st.booleans()))
    head = b"\r\n".join([line, *draw(st.lists(header_lines, max_size=5))])
    newline = draw(st.sampled_from([b"\r\n", b"\n"]))
    data = head.replace(b"\r\n", newline) + newline + newline + draw(bodies)
    if draw(st.booleans()):  # pipelined: another request on the same connection
        data += b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
    return data


@st.composite
def clean_requests(draw) -> bytes:
    """Requests the servers take, varied in method, target, headers and body."""
    method = draw(st.sampled_from([b"GET", b"HEAD", b"POST", b"DELETE"]))
    body = draw(st.binary(max_size=50)) if method == b"POST" else b""
    headers = [b"Host: x", b"Content-Length: %d" % len(body)] + draw(st.lists(st.sampled_from(
        [b"Connection: close", b"Accept: */*", b"User-Agent: fuzz", b"Expect: 100-continue", b"Upgrade: websocket"]), max_size=2))
    target = draw(targets.filter(lambda t: len(t) < 1000))
    return b"%s %s HTTP/1.1\r\n%s\r\n\r\n%s" % (method, target, b"\r\n".join(headers), body)


any_requests = st.one_of(clean_requests(), requests())


@st.composite
def mutated_requests(draw) -> bytes:
    data = bytearray(draw(any_requests))
    for _ in range(draw(st.integers(1, 6))):
        at = draw(st.integers(0, len(data)))
        action = draw(st.sampled_from(["flip", "insert", "delete", "truncate"]))
        if action == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=6) | st.sampled_from([b"\r\n", b"\x00", b" ", b":", b"\xff"]))
        elif action == "truncate":
            del data[at:]
        elif data and at < len(data):
            if action == "flip":
                data[at] ^= 1 << draw(st.integers(0, 7))
            else:
                del data[at : at + draw(st.integers(1, 8))]
    return bytes(data)


@given(any_requests)
@example(b"HEAD /healthz HTTP/1.1\r\nHost: x\r\n\r\n")  # was LocalProtocolError: the server crashed
@example(b"HEAD /containerLogs/ns/pod/c HTTP/1.1\r\nHost: x\r\n\r\n")  # a streamed answer to HEAD
@example(b"GET //[ HTTP/1.1\r\nHost: x\r\n\r\n")  # was ValueError from urlsplit: the server crashed
@example(b"CONNECT x:1 HTTP/1.1\r\nHost: x\r\n\r\n")  # was LocalProtocolError after a 2xx switched protocols
def test_any_request_gets_an_answer_and_the_server_keeps_serving(data):
    _serve(data)


@given(mutated_requests())
@example(b"GARBAGE\r\n\r\n")  # was closed without an answer; now 400
@example(b"GET / HTTP/1.1\r\n")  # ends mid-head
@example(b"GET /healthz HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n")  # 501, as Go answers
def test_mutated_requests_get_a_4xx_or_an_answer(data):
    _serve(data)


@given(st.binary(max_size=200))
def test_random_bytes_get_a_4xx_or_nothing(data):
    statuses = _serve(data)
    if data.strip() and not re.match(rb"\s*[A-Za-z!#$%&'*+.^_`|~0-9-]+ ", data):
        assert statuses and (400 <= statuses[0] < 500 or statuses[0] == 501), (data, statuses)


def test_a_body_over_the_limit_gets_413():
    tried("http server")
    body = b"x" * (MAX_BODY + 1)
    answer = _exchange(b"POST /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
    assert answer.startswith(b"HTTP/1.1 413 "), answer[:200]
    assert _exchange(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n").startswith(b"HTTP/1.1 200 ")
