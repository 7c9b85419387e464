"""The test process's side of the test API server: LocalApiServer starts
`python -m tests.support.apiserver` in a private temporary directory, holds its CA, issues
client certificates and kubeconfigs, gives httpx clients for any identity, and drives the
control port (faults, request log, settings). Synchronous, so that it works the same from
plain and trio tests: the server is another process, so a blocking call cannot deadlock it."""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import ssl
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from tests.support.apiserver import server as server_module
from tests.support.apiserver.faults import RequestRecord
from tests.support.apiserver.pki import CertificateAuthority, Identity, write_kubeconfig

PROJECT_ROOT = Path(__file__).resolve().parents[3]
NodeOrIdentity = Identity | str


class ApiServerError(RuntimeError):
    pass


def _users(users: Any) -> list[str] | None:
    if users is None:
        return None
    if isinstance(users, (str, Identity)):
        users = [users]
    return [Identity.parse(u).user for u in users]


class LocalApiServer:
    """A running test API server. Use as a context manager, or start() / stop()."""

    def __init__(
        self,
        *,
        history_window: int = 1000,
        bookmark_interval: float = 5.0,
        watch_timeout: float = 1800.0,
        field_validation: str = "Strict",
        startup_timeout: float = 30.0,
    ) -> None:
        self.options = {
            "--history-window": str(history_window),
            "--bookmark-interval": str(bookmark_interval),
            "--watch-timeout": str(watch_timeout),
            "--field-validation": field_validation,
        }
        self.startup_timeout = startup_timeout
        self.workdir = Path(tempfile.mkdtemp(prefix="pykubelet-apiserver-"))
        self.tls_dir = self.workdir / "tls"
        self.log_path = self.workdir / "apiserver.log"
        self.data_path = self.workdir / "objects.jsonl"  # the stored objects, kept across restart()
        self.process: subprocess.Popen[bytes] | None = None
        self.port = 0
        self.control_port = 0
        self._clients: list[httpx.Client] = []
        self._cert_files: dict[Identity, tuple[Path, Path]] = {}
        self._admin: httpx.Client | None = None
        self._control: httpx.Client | None = None
        self.final_log = ""  # the server's output, kept by stop() before the directory goes
        self.ca = CertificateAuthority("pykubelet-test-apiserver-ca")
        self.foreign_ca = CertificateAuthority("not-the-cluster-ca")

    # --- lifecycle --------------------------------------------------------------------------

    def start(self) -> LocalApiServer:
        self.tls_dir.mkdir(parents=True)
        server_cert, server_key = self.ca.issue("kube-apiserver", server_ips=("127.0.0.1",), server_dns=("localhost",))
        files = {
            server_module.CA_CERT: self.ca.cert_pem,
            server_module.CA_KEY: self.ca.key_pem,
            server_module.FOREIGN_CA_CERT: self.foreign_ca.cert_pem,
            server_module.SERVER_CERT: server_cert,
            server_module.SERVER_KEY: server_key,
        }
        for name, data in files.items():
            (self.tls_dir / name).write_bytes(data)
        self._spawn()
        return self

    def kill(self) -> None:
        """SIGKILL the server process (its stored objects stay in its journal)."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=5)

    def terminate(self) -> None:
        """End the server process cleanly (its stdin closed), keeping its stored objects."""
        if self.process is not None and self.process.poll() is None:
            self.process.stdin.close()
            self.process.wait(timeout=5)

    def restart(self) -> None:
        """Start the server again after kill() or terminate(): the same ports, CA and stored
        objects, as a kube-apiserver restarted on its etcd. What the old process held only
        in memory is gone: the watch history (a watch from an older version gets 410),
        faults, the request log, tokens and grants added at run time, changed settings and
        the key that signed service account tokens."""
        if self.process is not None and self.process.poll() is None:
            raise ApiServerError("the test API server is still running")
        self._spawn(ports=["--port", str(self.port), "--control-port", str(self.control_port)])

    def _spawn(self, ports: list[str] = ()) -> None:
        ready_file = self.workdir / "ready.json"
        ready_file.unlink(missing_ok=True)
        argv = [sys.executable, "-m", "tests.support.apiserver", "--tls-dir", str(self.tls_dir),
                "--ready-file", str(ready_file), "--exit-on-stdin-eof", "--data-file", str(self.data_path), *ports]
        for flag, value in self.options.items():
            argv += [flag, value]
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(PROJECT_ROOT), *filter(None, [env.get("PYTHONPATH")])])
        log = open(self.log_path, "ab")  # a restarted server adds to the first one's output
        try:
            self.process = subprocess.Popen(argv, cwd=PROJECT_ROOT, env=env, stdin=subprocess.PIPE,
                                            stdout=log, stderr=subprocess.STDOUT)
        finally:
            log.close()
        deadline = time.monotonic() + self.startup_timeout
        while not ready_file.exists():
            if self.process.poll() is not None:
                raise ApiServerError(f"test API server exited with {self.process.returncode} at startup:\n{self.log()}")
            if time.monotonic() > deadline:
                self.stop()
                raise ApiServerError(f"test API server not ready after {self.startup_timeout}s:\n{self.log()}")
            time.sleep(0.02)
        ready = json.loads(ready_file.read_text())
        self.port, self.control_port = ready["api_port"], ready["control_port"]
        if self._control is not None:  # the old process's connection is gone
            self._control.close()
            self._control = None

    def stop(self) -> None:
        for client in self._clients:
            client.close()
        self._clients.clear()
        if self._control is not None:
            self._control.close()
            self._control = None
        if self.process is not None:
            if self.process.stdin is not None:
                self.process.stdin.close()  # the server exits when its stdin closes
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=5)
            self.process = None
        self.final_log = self.log()
        shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> LocalApiServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def server_errors(self) -> str:
        """Tracebacks the server printed (bugs in the test server itself); empty when none."""
        text = self.log() if self.process is not None else self.final_log
        return text if "Traceback" in text else ""

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    # --- addresses and credentials ------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    @property
    def control_url(self) -> str:
        return f"http://127.0.0.1:{self.control_port}"

    @property
    def ca_pem(self) -> bytes:
        return self.ca.cert_pem

    @property
    def ca_path(self) -> Path:
        return self.tls_dir / server_module.CA_CERT

    def issue_client_cert(
        self,
        common_name: str = "system:node:node1",
        organization: str | tuple[str, ...] | list[str] | None = "system:nodes",
        *,
        expired: bool = False,
        trusted: bool = True,
    ) -> tuple[bytes, bytes]:
        """(cert_pem, key_pem) naming CN = user, O = groups. expired=True gives a certificate
        whose validity ended yesterday; trusted=False one from a CA the server does not trust.
        Both authenticate as nobody: 401."""
        orgs: tuple[str, ...] = (organization,) if isinstance(organization, str) else tuple(organization or ())
        issuer = self.ca if trusted else self.foreign_ca
        return issuer.issue(common_name, orgs, expired=expired)

    def add_token(self, identity: NodeOrIdentity, token: str | None = None) -> str:
        """Register a bearer token for an identity; returns the token."""
        who = Identity.parse(identity)
        token = token or secrets.token_hex(16)
        self._control_call("POST", "/tokens", {"token": token, "user": who.user, "groups": list(who.groups)})
        return token

    def grant(self, user: NodeOrIdentity | None = None, *, verbs: str | list[str], resources: str | list[str],
              group: str | None = None, api_groups: tuple[str, ...] = ("",), name: str | None = None) -> str:
        """Let `user` (or every member of `group`) do `verbs` on `resources` ("nodes/proxy",
        "nodes/*", "*") as far as SubjectAccessReviews are concerned (RBAC-like; the server's
        own API stays closed to them). Returns the binding's name, which the review's reason
        quotes."""
        body = {"users": [Identity.parse(user).user] if user is not None else [],
                "groups": [group] if group else [], "verbs": [verbs] if isinstance(verbs, str) else list(verbs),
                "resources": [resources] if isinstance(resources, str) else list(resources),
                "api_groups": list(api_groups), "name": name}
        return self._control_call("POST", "/grants", body)["name"]

    def clear_grants(self) -> None:
        self._control_call("DELETE", "/grants")

    def write_kubeconfig(self, path: Path | str, identity: NodeOrIdentity = "system:node:node1", *,
                         inline: bool = True, token: bool = False) -> Path:
        """A kubeconfig for `identity`: client certificate (default) or bearer token, with the
        credentials embedded (-data, `token`) or in files beside it (paths, `tokenFile`)."""
        who = Identity.parse(identity)
        if token:
            return write_kubeconfig(Path(path), server_url=self.url, ca_pem=self.ca_pem, user_name=who.user,
                                    token=self.add_token(who), inline=inline)
        cert_pem, key_pem = self.ca.issue(who.user, who.groups)
        return write_kubeconfig(Path(path), server_url=self.url, ca_pem=self.ca_pem, user_name=who.user,
                                cert_pem=cert_pem, key_pem=key_pem, inline=inline)

    def kubeconfig(self, identity: NodeOrIdentity = "system:node:node1", *, inline: bool = True, token: bool = False) -> Path:
        """write_kubeconfig into the server's temporary directory (removed at stop())."""
        who = Identity.parse(identity)
        stem = re.sub(r"[^A-Za-z0-9_.-]", "_", who.user) + ("-token" if token else "") + ("" if inline else "-files")
        return self.write_kubeconfig(self.workdir / "kubeconfigs" / f"{stem}.kubeconfig", who, inline=inline, token=token)

    def _cert_paths(self, who: Identity) -> tuple[Path, Path]:
        if who not in self._cert_files:
            cert_pem, key_pem = self.ca.issue(who.user, who.groups)
            stem = re.sub(r"[^A-Za-z0-9_.-]", "_", who.user)
            folder = self.workdir / "clients"
            folder.mkdir(exist_ok=True)
            cert, key = folder / f"{stem}.crt", folder / f"{stem}.key"
            cert.write_bytes(cert_pem)
            key.write_bytes(key_pem)
            key.chmod(0o600)
            self._cert_files[who] = (cert, key)
        return self._cert_files[who]

    def ssl_context(self, identity: NodeOrIdentity | None = "admin") -> ssl.SSLContext:
        """A client TLS context that trusts the server, with identity's certificate (None: no certificate)."""
        context = ssl.create_default_context(cafile=str(self.ca_path))
        if identity is not None:
            cert, key = self._cert_paths(Identity.parse(identity))
            context.load_cert_chain(str(cert), str(key))
        return context

    def client(self, identity: NodeOrIdentity | None = "admin", *, timeout: float = 10.0) -> httpx.Client:
        """A synchronous httpx client for the API as `identity`; closed at stop()."""
        client = httpx.Client(base_url=self.url, verify=self.ssl_context(identity), timeout=timeout)
        self._clients.append(client)
        return client

    def async_client(self, identity: NodeOrIdentity | None = "admin", *, timeout: float = 10.0) -> httpx.AsyncClient:
        """An httpx.AsyncClient (works on trio) as `identity`; the caller closes it."""
        return httpx.AsyncClient(base_url=self.url, verify=self.ssl_context(identity), timeout=timeout)

    @property
    def admin(self) -> httpx.Client:
        """An httpx.Client as admin (system:masters): create, get, delete and watch anything."""
        if self._admin is None or self._admin.is_closed:
            self._admin = self.client("admin")
        return self._admin

    # --- control port ---------------------------------------------------------------------------

    def _control_call(self, method: str, path: str, body: Any = None) -> Any:
        if self._control is None:
            self._control = httpx.Client(base_url=self.control_url, timeout=10.0)
        response = self._control.request(method, path, json=body)
        if response.status_code != 200:
            raise ApiServerError(f"control {method} {path}: {response.status_code} {response.text}")
        return response.json()

    def _fault(self, kind: str, *, users: Any = None, verbs: Any = None, resources: Any = None,
               include_admin: bool = False, **spec: Any) -> None:
        payload = {"kind": kind, "users": _users(users), "include_admin": include_admin,
                   "verbs": [verbs] if isinstance(verbs, str) else verbs,
                   "resources": [resources] if isinstance(resources, str) else resources}
        payload.update({k: v for k, v in spec.items() if v is not None})
        self._control_call("POST", "/faults", payload)

    def fail(self, status: int = 500, count: int | None = None, duration: float | None = None, *,
             retry_after: int | None = None, message: str | None = None, **match: Any) -> None:
        """Answer matching requests with `status` (a metav1.Status) for the next `count`
        requests, for `duration` seconds, or until clear_faults(). Match with users=,
        verbs=, resources= ("pods/status", "leases", ...); system:masters is spared unless
        include_admin=True."""
        self._fault("fail", status=status, count=count, duration=duration, retry_after=retry_after,
                    message=message, **match)

    def hang(self, duration: float | None = None, count: int | None = None, **match: Any) -> None:
        """Hold matching requests unanswered (and stall open watch streams) until `duration`
        ends or clear_faults(); a client with a shorter timeout sees a timeout."""
        self._fault("hang", duration=duration, count=count, **match)

    def reset(self, duration: float | None = None, count: int | None = None, **match: Any) -> None:
        """Close matching connections abruptly (TCP RST), the open ones now and every new
        request's until `duration` ends or clear_faults()."""
        self._fault("reset", duration=duration, count=count, **match)

    def latency(self, seconds: float, duration: float | None = None, **match: Any) -> None:
        """Delay every matching request by `seconds`."""
        self._fault("latency", seconds=seconds, duration=duration, **match)

    def clear_faults(self) -> None:
        self._control_call("DELETE", "/faults")

    def expire_watches(self) -> str:
        """Compact the watch history: open watches get an ERROR 410 event and end, and a watch
        from any resourceVersion seen so far gets 410. Returns the new resourceVersion."""
        return self._control_call("POST", "/expire-watches")["resourceVersion"]

    def configure(self, **settings: Any) -> dict[str, Any]:
        """Change settings of the running server: bookmark_interval, history_window,
        watch_timeout, field_validation ("Strict" | "Warn" | "Ignore"), too_large_rv_wait."""
        return self._control_call("PATCH", "/settings", settings)

    def requests(self, *, verb: str | None = None, resource: str | None = None,
                 user: NodeOrIdentity | None = None, since: float | None = None) -> list[RequestRecord]:
        """The request log (oldest first), filtered by verb, resource ("pods/status"), user and
        arrival time (unix seconds)."""
        records = [RequestRecord(**r) for r in self._control_call("GET", "/requests")]
        who = Identity.parse(user).user if user is not None else None
        return [
            r for r in records
            if (verb is None or r.verb == verb) and (resource is None or r.resource == resource)
            and (who is None or r.user == who) and (since is None or r.time >= since)
        ]

    def token_requests(self, *, user: NodeOrIdentity | None = None, since: float | None = None) -> list[RequestRecord]:
        """The logged POSTs to serviceaccounts/<sa>/token; a record's token_request is the
        TokenRequest as answered (status.token, status.expirationTimestamp) or, when refused,
        as sent (its status says why)."""
        return self.requests(verb="create", resource="serviceaccounts/token", user=user, since=since)

    def clear_requests(self) -> None:
        self._control_call("DELETE", "/requests")

    def objects(self) -> dict[str, list[dict[str, Any]]]:
        """Every stored object by resource, read through the control port (no faults apply)."""
        return self._control_call("GET", "/objects")
