"""The test API server process: `python -m tests.support.apiserver --tls-dir DIR --ready-file
FILE`. It serves the Kubernetes API with TLS on 127.0.0.1 (random port unless --port) and
the control port in plain HTTP, writes both ports to the ready file once it listens, and
exits when its stdin closes (so it never outlives the test process that started it).

By hand: `python -m tests.support.apiserver --standalone DIR [--node node1] [--port 6443]`
makes the PKI in DIR, writes DIR/admin.kubeconfig and DIR/<node>.kubeconfig, and serves
until interrupted."""

from __future__ import annotations

import argparse
import json
import os
import ssl
import sys
from pathlib import Path

import trio

from tests.support.apiserver.api import KubeApi, Settings
from tests.support.apiserver.control import Control
from tests.support.apiserver.faults import Faults
from tests.support.apiserver.httpserver import HttpServer
from tests.support.apiserver.kubelet_proxy import KUBELET_CLIENT_USER, KubeletProxy
from tests.support.apiserver.pki import MASTERS_GROUP, CertificateAuthority, Identity, write_kubeconfig
from tests.support.apiserver.store import Store

# OpenSSL's X509_V_FLAG_NO_CHECK_TIME: an expired client certificate completes the handshake
# and is refused with 401 by the authenticator, as kube-apiserver does.
_NO_CHECK_TIME = 0x200000

# Files of the TLS directory (written by the handle before the server starts).
CA_CERT, CA_KEY = "ca.crt", "ca.key"
FOREIGN_CA_CERT = "foreign-ca.crt"
SERVER_CERT, SERVER_KEY = "server.crt", "server.key"
KUBELET_CLIENT_CERT, KUBELET_CLIENT_KEY = "kubelet-client.crt", "kubelet-client.key"


def server_ssl_context(tls_dir: Path) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(tls_dir / SERVER_CERT, tls_dir / SERVER_KEY)
    context.verify_mode = ssl.CERT_OPTIONAL
    context.load_verify_locations(tls_dir / CA_CERT)
    # Certificates of the "foreign" CA pass the handshake so that the authenticator can answer
    # 401 for them; any other unknown issuer fails the handshake (see README).
    if (tls_dir / FOREIGN_CA_CERT).exists():
        context.load_verify_locations(tls_dir / FOREIGN_CA_CERT)
    context.verify_flags = ssl.VerifyFlags(int(context.verify_flags) | _NO_CHECK_TIME)
    return context


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tests.support.apiserver", description=__doc__)
    parser.add_argument("--tls-dir", type=Path)
    parser.add_argument("--ready-file", type=Path)
    parser.add_argument("--standalone", type=Path, metavar="DIR", help="make certificates and kubeconfigs in DIR")
    parser.add_argument("--node", action="append", default=None, help="node name for --standalone kubeconfigs")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--control-port", type=int, default=0)
    parser.add_argument("--history-window", type=int, default=Settings.history_window)
    parser.add_argument("--bookmark-interval", type=float, default=Settings.bookmark_interval)
    parser.add_argument("--watch-timeout", type=float, default=Settings.watch_timeout)
    parser.add_argument("--field-validation", choices=("Strict", "Warn", "Ignore"), default=Settings.field_validation)
    parser.add_argument("--exit-on-stdin-eof", action="store_true")
    parser.add_argument("--data-file", type=Path, help="journal of stored objects, read back at start")
    args = parser.parse_args(argv)
    if args.standalone is None and (args.tls_dir is None or args.ready_file is None):
        parser.error("--tls-dir and --ready-file are required (or --standalone DIR)")
    if args.standalone is not None:
        args.tls_dir = args.standalone / "tls"
        args.ready_file = args.standalone / "ready.json"
    return args


def _make_standalone_pki(tls_dir: Path) -> None:
    if (tls_dir / CA_CERT).exists():
        return
    tls_dir.mkdir(parents=True, exist_ok=True)
    ca = CertificateAuthority("pykubelet-test-apiserver-ca")
    cert, key = ca.issue("kube-apiserver", server_ips=("127.0.0.1",), server_dns=("localhost",))
    for name, data in {CA_CERT: ca.cert_pem, CA_KEY: ca.key_pem, SERVER_CERT: cert, SERVER_KEY: key}.items():
        (tls_dir / name).write_bytes(data)


def _write_standalone_kubeconfigs(args: argparse.Namespace, ca: CertificateAuthority, port: int) -> None:
    url = f"https://127.0.0.1:{port}"
    identities = [Identity.admin()] + [Identity.node(n) for n in (args.node or ["node1"])]
    for who in identities:
        cert, key = ca.issue(who.user, who.groups)
        name = "admin" if who.user == "admin" else who.user.rsplit(":", 1)[-1]
        path = write_kubeconfig(args.standalone / f"{name}.kubeconfig", server_url=url, ca_pem=ca.cert_pem,
                                user_name=who.user, cert_pem=cert, key_pem=key)
        print(f"{who.user}: {path}", file=sys.stderr)


def _kubelet_client_files(tls_dir: Path, ca: CertificateAuthority) -> tuple[str, str]:
    """The API server's client certificate toward kubelets (kubeadm's
    apiserver-kubelet-client; system:masters, so the kubelet's SubjectAccessReviews allow it)."""
    cert_path, key_path = tls_dir / KUBELET_CLIENT_CERT, tls_dir / KUBELET_CLIENT_KEY
    if not cert_path.exists():
        cert, key = ca.issue(KUBELET_CLIENT_USER, (MASTERS_GROUP,))
        key_path.write_bytes(key)
        cert_path.write_bytes(cert)
    return str(cert_path), str(key_path)


async def _exit_on_stdin_eof(cancel: trio.CancelScope) -> None:
    stream = trio.lowlevel.FdStream(os.dup(sys.stdin.fileno()))
    try:
        while await stream.receive_some(1024):
            pass
    except (trio.BrokenResourceError, OSError):
        pass
    cancel.cancel()


async def serve(args: argparse.Namespace) -> None:
    tls_dir: Path = args.tls_dir
    if args.standalone is not None:
        _make_standalone_pki(tls_dir)
    ca = CertificateAuthority("", cert_pem=(tls_dir / CA_CERT).read_bytes(), key_pem=(tls_dir / CA_KEY).read_bytes())
    settings = Settings(history_window=args.history_window, bookmark_interval=args.bookmark_interval,
                        watch_timeout=args.watch_timeout, field_validation=args.field_validation)
    store = Store(history_window=settings.history_window, journal=args.data_file)
    api_listener = (await trio.open_tcp_listeners(args.port, host="127.0.0.1"))[0]
    control_listener = (await trio.open_tcp_listeners(args.control_port, host="127.0.0.1"))[0]
    api_port = api_listener.socket.getsockname()[1]
    api = KubeApi(store, Faults(), ca, settings, api_port=api_port)  # the kubernetes Service targets it
    api.kubelets = KubeletProxy(store, *_kubelet_client_files(tls_dir, ca))
    control = Control(api)
    api_http = HttpServer(api.handle, server_ssl_context(tls_dir))
    control.api_http = api_http
    control_http = HttpServer(control.handle)
    ready = {
        "api_port": api_port,
        "control_port": control_listener.socket.getsockname()[1],
        "pid": os.getpid(),
    }
    if args.standalone is not None:
        _write_standalone_kubeconfigs(args, ca, ready["api_port"])
        print(f"serving https://127.0.0.1:{ready['api_port']} (control http://127.0.0.1:{ready['control_port']})",
              file=sys.stderr)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(api_http.serve, api_listener)
        nursery.start_soon(control_http.serve, control_listener)
        if args.exit_on_stdin_eof:
            nursery.start_soon(_exit_on_stdin_eof, nursery.cancel_scope)
        partial = args.ready_file.with_suffix(".tmp")
        partial.write_text(json.dumps(ready))
        partial.rename(args.ready_file)


def main(argv: list[str] | None = None) -> None:
    try:
        trio.run(serve, parse_args(argv))
    except KeyboardInterrupt:
        pass
