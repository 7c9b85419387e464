"""A tiny scripted HTTPS server for the API client's unit tests: http.server in a thread,
TLS with a client certificate required, on 127.0.0.1. Each route answers with a Reply: a
JSON body, a chunked watch stream, a hang or a connection reset. Not an API server: the
behaviours of the real one are tested against tests/support/apiserver."""

from __future__ import annotations

import json
import socket
import ssl
import struct
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit


@dataclass
class Seen:
    """One request as the server saw it."""

    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: bytes
    client_cn: str | None

    def json(self):
        return json.loads(self.body)


Reply = Callable[["_Handler", "HttpsServer"], None]


def reply(status: int, body: dict | list | str | None = None, headers: dict | None = None) -> Reply:
    def send(h: _Handler, server: HttpsServer) -> None:
        data = body.encode() if isinstance(body, str) else (
            b"" if body is None else json.dumps(body).encode())
        h.send_response(status)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            h.send_header(k, v)
        h.end_headers()
        h.wfile.write(data)
    return send


def status(code: int, reason: str, message: str, details: dict | None = None,
           headers: dict | None = None) -> Reply:
    """A metav1.Status answer, as kube-apiserver sends for an error."""
    body = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": message, "reason": reason, "code": code}
    if details is not None:
        body["details"] = details
    return reply(code, body, headers)


def watch_stream(events: list[dict | bytes], *, then_hang: bool = False,
                 chunk_split: bool = False) -> Reply:
    """A 200 chunked stream of events (dicts become JSON lines; bytes go out as they are)."""
    def send(h: _Handler, server: HttpsServer) -> None:
        h.send_response(200)
        h.send_header("Content-Type", "application/json")
        h.send_header("Transfer-Encoding", "chunked")
        h.end_headers()
        for event in events:
            data = event if isinstance(event, bytes) else json.dumps(event).encode() + b"\n"
            pieces = [data[: len(data) // 2], data[len(data) // 2:]] if chunk_split else [data]
            for piece in pieces:
                h.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                h.wfile.flush()
        if then_hang:
            server.release.wait(30)
            return
        h.wfile.write(b"0\r\n\r\n")
    return send


def hang(h: _Handler, server: HttpsServer) -> None:
    """Read the request, never answer (until the test ends)."""
    server.release.wait(30)
    h.close_connection = True


def reset(h: _Handler, server: HttpsServer) -> None:
    """Close the TCP connection with an RST instead of answering."""
    h.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    h.connection.close()
    h.close_connection = True


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, *args) -> None:  # keep test output clean
        pass

    def _serve(self) -> None:
        parts = urlsplit(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        cert = self.connection.getpeercert() or {}
        cn = next((v for rdn in cert.get("subject", ()) for k, v in rdn if k == "commonName"), None)
        owner = self.server.owner
        owner.seen.append(Seen(self.command, parts.path,
                               {k: v[-1] for k, v in parse_qs(parts.query).items()},
                               {k.lower(): v for k, v in self.headers.items()}, body, cn))
        queue = owner.routes.get((self.command, parts.path))
        if queue:
            answer = queue.pop(0) if len(queue) > 1 else queue[0]
        else:
            answer = status(404, "NotFound", f"the server could not find the requested resource ({parts.path})")
        answer(self, owner)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _serve


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    owner: HttpsServer

    def finish_request(self, request, client_address) -> None:
        # The TLS handshake runs in the request's thread, not in the accept loop.
        try:
            tls = self.owner.context.wrap_socket(request, server_side=True)
        except (ssl.SSLError, OSError):
            return
        try:
            super().finish_request(tls, client_address)
        finally:
            try:
                tls.close()
            except OSError:
                pass

    def handle_error(self, request, client_address) -> None:
        pass  # clients that go away mid-answer are part of the tests


@dataclass
class HttpsServer:
    """`server.on("GET", "/api/v1/pods", reply(...), ...)`: replies are served in order, the
    last one for every later request. `seen` records the requests."""

    cert: Path
    key: Path
    client_ca: Path | None
    tls_max: ssl.TLSVersion = ssl.TLSVersion.MAXIMUM_SUPPORTED
    routes: dict[tuple[str, str], list[Reply]] = field(default_factory=dict)
    seen: list[Seen] = field(default_factory=list)
    release: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.load_cert_chain(self.cert, self.key)
        self.context.maximum_version = self.tls_max
        if self.client_ca is not None:
            self.context.verify_mode = ssl.CERT_REQUIRED
            self.context.load_verify_locations(self.client_ca)
        self._httpd = _Server(("127.0.0.1", 0), _Handler)
        self._httpd.owner = self
        self.port = self._httpd.server_address[1]
        self.url = f"https://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True,
                                        kwargs={"poll_interval": 0.05})

    def on(self, method: str, path: str, *replies: Reply) -> None:
        self.routes[(method, path)] = list(replies)

    def start(self) -> HttpsServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.release.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(5)
