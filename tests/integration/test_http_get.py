"""ports.http_get against real sockets on 127.0.0.1 / ::1: what goes on the wire, what
comes back however the server frames it, TLS without verification, and the failures."""

from __future__ import annotations

import socket
import ssl
import struct
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path

import httpx
import pytest
import trio

from pykubelet.ports.http_get import HttpGetError, close_socket, dial_tcp, http_get
from pykubelet.ports.probers import USER_AGENT, probe_http
from tests.support.apiserver.pki import CertificateAuthority

Serve = Callable[[trio.SocketStream, bytes], Awaitable[None]]


async def _read_head(stream: trio.abc.Stream) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = await stream.receive_some(4096)
        if not chunk:
            break
        data += chunk
    return data


def _replying(raw: bytes) -> Serve:
    """An answer that writes `raw` and is done."""

    async def answer(stream: trio.abc.Stream, head: bytes) -> None:
        await stream.send_all(raw)

    return answer


async def _serve_once(
    nursery: trio.Nursery, answer: Serve, *, host: str = "127.0.0.1", tls: ssl.SSLContext | None = None,
    read_first: bool = True,
) -> tuple[int, list[bytes]]:
    """A listener answering each connection with `answer(stream, request head)` (an empty
    head unless `read_first`); the port and the request heads it saw."""
    listeners = await trio.open_tcp_listeners(0, host=host)
    port = listeners[0].socket.getsockname()[1]
    seen: list[bytes] = []

    async def handle(stream: trio.abc.Stream) -> None:
        if tls is not None:
            stream = trio.SSLStream(stream, tls, server_side=True)
        try:
            head = await _read_head(stream) if read_first else b""
            seen.append(head)
            await answer(stream, head)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        finally:
            await trio.aclose_forcefully(stream)

    nursery.start_soon(trio.serve_listeners, handle, listeners)
    return port, seen


async def _get(port: int, path: str = "/", host: str = "127.0.0.1", scheme: str = "http", max_body: int = 1024):
    where = f"[{host}]" if ":" in host else host
    return await http_get(httpx.URL(f"{scheme}://{where}:{port}{path}"), (("Connection", "close"),), max_body)


async def test_one_request_per_connection_and_the_status_of_the_answer(nursery):
    reply = b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\nX-Seen: yes\r\n\r\nfine"
    port, seen = await _serve_once(nursery, _replying(reply))
    for _ in range(2):
        assert await _get(port, "/healthz?deep=1") == (200, "", b"")  # no body read for a 2xx
    assert len(seen) == 2  # a connection each
    assert seen[0].startswith(b"GET /healthz?deep=1 HTTP/1.1\r\n")
    assert f"host: 127.0.0.1:{port}\r\n".encode() in seen[0].lower()
    assert b"connection: close\r\n" in seen[0].lower()


async def test_the_probe_request_carries_user_agent_accept_and_the_probes_headers(nursery):
    port, seen = await _serve_once(nursery, _replying(b"HTTP/1.1 204 No Content\r\n\r\n"))
    url = httpx.URL(f"http://127.0.0.1:{port}/ready")
    assert await probe_http(url, [("X-Probe", "yes")], timeout=1) == ("success", "")
    head = seen[0].lower()
    assert f"user-agent: {USER_AGENT}\r\n".lower().encode() in head
    assert b"accept: */*\r\n" in head and b"x-probe: yes\r\n" in head


async def test_a_host_header_of_the_probe_replaces_the_urls(nursery):
    port, seen = await _serve_once(nursery, _replying(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"))
    url = httpx.URL(f"http://127.0.0.1:{port}/")
    assert await probe_http(url, [("Host", "app.example")], timeout=1) == ("success", "")
    assert seen[0].lower().count(b"host:") == 1 and b"host: app.example\r\n" in seen[0].lower()


async def test_a_header_that_would_split_the_request_is_refused():
    with pytest.raises(HttpGetError, match="invalid header field value"):
        await http_get(httpx.URL("http://127.0.0.1:9/"), (("X-A", "x\r\nInjected: 1"),), 1024)


async def test_a_redirects_chunked_body_is_read_up_to_max_body_only(nursery):
    async def answer(stream, head):
        await stream.send_all(b"HTTP/1.1 302 Found\r\nLocation: /x\r\nTransfer-Encoding: chunked\r\n\r\n")
        for _ in range(100):  # 100 KiB, far more than is read
            await stream.send_all(b"400\r\n" + b"x" * 1024 + b"\r\n")
        await stream.send_all(b"0\r\n\r\n")

    port, _ = await _serve_once(nursery, answer)
    assert await _get(port, max_body=1500) == (302, "/x", b"x" * 1500)


async def test_a_redirects_small_chunked_body_is_decoded(nursery):
    port, _ = await _serve_once(nursery, _replying(
        b"HTTP/1.1 301 Moved\r\nLocation: /y\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"3;ext=1\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"
    ))
    assert await _get(port) == (301, "/y", b"abcde")


async def test_a_body_that_ends_when_the_server_closes(nursery):
    reply = b"HTTP/1.0 302 Found\r\nLocation: http://10.9.9.9/\r\n\r\nmoved along"
    port, _ = await _serve_once(nursery, _replying(reply))
    assert await _get(port) == (302, "http://10.9.9.9/", b"moved along")


async def test_an_informational_answer_is_skipped_for_the_final_one(nursery):
    reply = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n"
    port, _ = await _serve_once(nursery, _replying(reply))
    assert (await _get(port)).status == 503


async def test_a_server_that_closes_without_answering_is_a_protocol_error(nursery):
    async def answer(stream, head):
        return

    port, _ = await _serve_once(nursery, answer)
    with pytest.raises(HttpGetError, match="closed the connection without an answer"):
        await _get(port)
    outcome, message = await probe_http(httpx.URL(f"http://127.0.0.1:{port}/"), timeout=1)
    assert outcome == "failure" and message.startswith(f'Get "http://127.0.0.1:{port}/": ')


async def test_garbage_instead_of_http_is_a_protocol_error(nursery):
    port, _ = await _serve_once(nursery, _replying(b"SSH-2.0-OpenSSH_9.2\r\n\r\n"))
    with pytest.raises(HttpGetError, match="malformed HTTP response"):
        await _get(port)


async def test_refused_connection_is_a_connect_error_naming_the_address():
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        port = held.getsockname()[1]  # bound, not listening: refused
        with pytest.raises(HttpGetError, match=f"dial tcp 127.0.0.1:{port}: connect: connection refused"):
            await _get(port)


async def test_ipv6_loopback(nursery):
    if not socket.has_ipv6:
        pytest.skip("no IPv6 on this machine")
    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
    except OSError:
        pytest.skip("::1 is not configured on this machine")

    port, seen = await _serve_once(nursery, _replying(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"), host="::1")
    assert (await _get(port, host="::1")).status == 200
    assert f"host: [::1]:{port}".encode() in seen[0].lower()


async def test_https_with_a_certificate_nobody_trusts(nursery):
    authority = CertificateAuthority("probe-test-ca")
    cert, key = authority.issue("probe-target", server_ips=("127.0.0.1",))
    with tempfile.TemporaryDirectory() as folder:
        (Path(folder) / "cert.pem").write_bytes(cert)
        (Path(folder) / "key.pem").write_bytes(key)
        server_tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        server_tls.load_cert_chain(Path(folder) / "cert.pem", Path(folder) / "key.pem")

    reply = b"HTTP/1.1 307 Temporary Redirect\r\nLocation: /tls\r\nContent-Length: 6\r\n\r\nsecret"
    port, seen = await _serve_once(nursery, _replying(reply), tls=server_tls)
    assert await _get(port, scheme="https") == (307, "/tls", b"secret")
    assert seen[0].startswith(b"GET / HTTP/1.1")


def test_the_https_context_verifies_nothing_and_holds_no_ca_store():
    from pykubelet.ports.http_get import _tls_context

    context = _tls_context()
    assert (context.verify_mode, context.check_hostname) == (ssl.CERT_NONE, False)
    assert context.cert_store_stats()["x509_ca"] == 0  # the system's CAs would be ~1 MB of memory for nothing
    assert context.minimum_version >= ssl.TLSVersion.TLSv1_2


async def test_https_to_a_plain_http_server_is_a_connect_error(nursery):
    reply = b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n"
    port, _ = await _serve_once(nursery, _replying(reply), read_first=False)
    with trio.fail_after(10), pytest.raises(HttpGetError, match="TLS handshake"):
        await _get(port, scheme="https")


async def test_a_probe_connection_carries_gos_linger_and_ends_with_a_fin():
    # Go's probe dialer: SO_LINGER on with 1 s, so that close sends a FIN (linger 0 would reset).
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        sock = await dial_tcp("127.0.0.1", listener.getsockname()[1])
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_LINGER, 8) == struct.pack("ii", 1, 1)
        peer, _ = listener.accept()
        with peer:
            close_socket(sock)
            assert peer.recv(1) == b""  # an orderly end: a reset raises ConnectionResetError
