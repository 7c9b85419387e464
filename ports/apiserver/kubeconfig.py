"""Kubeconfig loading: the kubelet's --kubeconfig turned into Credentials (server URL, a
verifying ssl.SSLContext, client certificate and/or bearer token).

Follows client-go: current-context -> context -> cluster and user; relative paths resolve
against the kubeconfig's directory; the -data forms win over the file forms. Unlike
client-go it refuses insecure-skip-tls-verify and plain http. No host name is resolved here.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import datetime as dt
import os
import ssl
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import yaml

from pykubelet.messages import strict_yaml

from ._x509 import certificate_subject


class KubeconfigError(Exception):
    """The kubeconfig cannot be used; the message names the file, the field and the fix."""

    def __init__(self, path: str, field: str | None, problem: str) -> None:
        where = f"kubeconfig {path}" + (f": {field}" if field else "")
        super().__init__(f"{where}: {problem}")
        self.path = path
        self.field = field
        self.problem = problem


@dataclass(frozen=True)
class ClientCertificate:
    """What the client certificate says about the kubelet's identity (for error messages)."""

    source: str  # "client-certificate /etc/kubernetes/pki/kubelet.crt" or "...-data"
    common_name: str | None  # system:node:<name> for a kubelet
    organizations: tuple[str, ...]  # system:nodes for a kubelet
    not_after: dt.datetime | None  # UTC

    def describe(self) -> str:
        parts = []
        if self.common_name:
            parts.append(f"CN={self.common_name}")
        parts += [f"O={o}" for o in self.organizations]
        if self.not_after is not None:
            state = "expired" if self.not_after <= dt.datetime.now(dt.timezone.utc) else "valid until"
            parts.append(f"{state} {self.not_after:%Y-%m-%dT%H:%M:%SZ}")
        return f"{self.source} ({', '.join(parts)})" if parts else self.source


@dataclass
class Credentials:
    """Everything the API client needs to reach and authenticate to the API server."""

    server: str  # https://host[:port][/prefix], no trailing slash
    ssl_context: ssl.SSLContext
    kubeconfig: str  # absolute path of the file these came from
    context: str
    cluster: str
    user: str
    ca_source: str  # where the CA came from, for "wrong CA?" messages
    client_certificate: ClientCertificate | None = None
    token: str | None = None  # the bearer token (as first read from token_file, if set)
    token_file: str | None = None  # re-read by the client every minute, as client-go does
    tls_server_name: str | None = None

    @property
    def identity(self) -> str | None:
        """The user name the API server will see, when the credentials say it (client cert CN)."""
        cert = self.client_certificate
        return cert.common_name if cert is not None else None

    def describe_user(self) -> str:
        """'the client certificate X (CN=..., O=...)' / 'the bearer token (tokenFile X)'."""
        if self.client_certificate is not None:
            return f"the client certificate {self.client_certificate.describe()}"
        if self.token_file is not None:
            return f"the bearer token in tokenFile {self.token_file}"
        return "the bearer token"


_TOKEN_FILE_REFRESH = 60.0  # client-go re-reads a tokenFile about once a minute


@dataclass
class TokenFile:
    """A bearer token read from a file and re-read every minute, keeping the last good one."""

    path: str
    token: str
    read_at: float = field(default_factory=time.monotonic)

    def current(self) -> str:
        now = time.monotonic()
        if now - self.read_at >= _TOKEN_FILE_REFRESH:
            self.read_at = now
            with contextlib.suppress(OSError, UnicodeDecodeError):
                fresh = _read_file(self.path).decode().strip()
                if fresh:
                    self.token = fresh
        return self.token


# --- loading ---------------------------------------------------------------------------


def load_kubeconfig(path: str) -> Credentials:
    """Read a kubeconfig and build Credentials for its current context.

    Raises KubeconfigError naming the file, the field and the fix for anything unusable.
    """
    path = os.path.abspath(path)
    base = os.path.dirname(path)
    try:
        raw = _read_file(path)
    except FileNotFoundError:
        raise KubeconfigError(path, None, "no such file; pass --kubeconfig the path of the "
                              "kubelet's kubeconfig (or omit --kubeconfig for standalone mode)") from None
    except OSError as exc:
        raise KubeconfigError(path, None, f"cannot read it: {exc.strerror}; "
                              "check the path and the file's permissions") from None
    try:
        doc = strict_yaml.load(raw)
    except RecursionError:
        raise KubeconfigError(path, None, "not valid YAML (nested too deeply); fix the file") from None
    except yaml.YAMLError as exc:
        where = ""
        mark = getattr(exc, "problem_mark", None)
        if mark is not None:
            where = f" at line {mark.line + 1}, column {mark.column + 1}"
        problem = getattr(exc, "problem", None) or "parse error"
        raise KubeconfigError(path, None, f"not valid YAML{where} ({problem}); "
                              "fix the file (kubectl config view --kubeconfig FILE shows it)") from None
    if not isinstance(doc, dict):
        raise KubeconfigError(path, None, "not a kubeconfig (expected a mapping with clusters, "
                              "contexts, users and current-context)")

    contexts = _named(doc, "contexts", "context", path)
    current = doc.get("current-context")
    if not current:
        raise KubeconfigError(path, "current-context", "not set; set it to one of the contexts "
                              f"({_names(contexts)}) with `kubectl config use-context NAME "
                              f"--kubeconfig {path}`")
    if not isinstance(current, str) or current not in contexts:
        raise KubeconfigError(path, "current-context", f"context {current!r} not found "
                              f"(contexts: {_names(contexts)}); add it under contexts or "
                              "set current-context to an existing one")
    context = contexts[current]
    cluster_name = context.get("cluster")
    user_name = context.get("user")
    clusters = _named(doc, "clusters", "cluster", path)
    users = _named(doc, "users", "user", path)
    if not isinstance(cluster_name, str) or cluster_name not in clusters:
        raise KubeconfigError(path, f"contexts[{current}].cluster",
                              f"cluster {cluster_name!r} not found (clusters: {_names(clusters)}); "
                              "name a cluster defined under clusters")
    if not isinstance(user_name, str) or user_name not in users:
        raise KubeconfigError(path, f"contexts[{current}].user",
                              f"user {user_name!r} not found (users: {_names(users)}); "
                              "name a user defined under users")

    loader = _Loader(path, base)
    cluster = clusters[cluster_name]
    user = users[user_name]
    server = loader.server(cluster, f"clusters[{cluster_name}]")
    ctx, ca_source = loader.ssl_context(cluster, f"clusters[{cluster_name}]")
    cert = loader.client_certificate(ctx, user, user_name)
    token, token_file = loader.token(user, f"users[{user_name}]")
    if cert is None and token is None and token_file is None:
        unsupported = [k for k in ("exec", "auth-provider", "username", "password") if user.get(k)]
        note = (f" ({', '.join(unsupported)} {'is' if len(unsupported) == 1 else 'are'} not "
                "supported by pykubelet)") if unsupported else ""
        raise KubeconfigError(path, f"users[{user_name}]", "no credentials" + note + ": set "
                              "client-certificate and client-key (or their -data forms), "
                              "token or tokenFile; a kubelet normally uses its client "
                              "certificate (CN=system:node:<node name>, O=system:nodes)")
    tls_server_name = cluster.get("tls-server-name") or None
    return Credentials(
        server=server, ssl_context=ctx, kubeconfig=path, context=current,
        cluster=cluster_name, user=user_name, ca_source=ca_source,
        client_certificate=cert, token=token, token_file=token_file,
        tls_server_name=tls_server_name,
    )


def _named(doc: dict, key: str, inner: str, path: str) -> dict[str, dict]:
    """clusters/contexts/users: a list of {name, <inner>: {...}} -> {name: {...}}."""
    entries = doc.get(key) or []
    if not isinstance(entries, list):
        raise KubeconfigError(path, key, f"expected a list of {{name, {inner}}} entries")
    out: dict[str, dict] = {}
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict) or not entry.get("name"):
            raise KubeconfigError(path, f"{key}[{i}]", f"expected {{name, {inner}}}; "
                                  "give every entry a name")
        body = entry.get(inner) or {}
        if not isinstance(body, dict):
            raise KubeconfigError(path, f"{key}[{entry['name']}].{inner}", "expected a mapping")
        out[str(entry["name"])] = body
    return out


def _names(entries: dict) -> str:
    return ", ".join(sorted(entries)) or "none"


class _Loader:
    """Reads the fields of one kubeconfig, with errors that name the file and the field."""

    def __init__(self, path: str, base: str) -> None:
        self.path = path
        self.base = base

    def error(self, field_: str, problem: str) -> KubeconfigError:
        return KubeconfigError(self.path, field_, problem)

    def server(self, cluster: dict, where: str) -> str:
        server = cluster.get("server")
        if not server:
            raise self.error(f"{where}.server", "required; set the API server's URL, "
                             "e.g. https://10.0.0.1:6443")
        try:
            parts = urlsplit(str(server))
        except ValueError as exc:  # "https://[::1": an unclosed IPv6 host
            raise self.error(f"{where}.server", f"{server!r}: {exc}; use https://HOST:PORT") from None
        if parts.scheme != "https":
            raise self.error(f"{where}.server", f"{server!r} is not an https URL; pykubelet "
                             "talks to the API server over TLS only: use https://HOST:PORT")
        host = parts.hostname
        try:
            parts.port  # noqa: B018 -- raises ValueError for a port that is not a number
        except ValueError as exc:
            raise self.error(f"{where}.server", f"{server!r}: {exc}; use https://HOST:PORT") from None
        if not host:
            raise self.error(f"{where}.server", f"{server!r} has no host; use https://HOST:PORT")
        if parts.query or parts.fragment:
            raise self.error(f"{where}.server", f"{server!r}: a query or fragment is not "
                             "allowed; use https://HOST:PORT[/path]")
        return str(server).rstrip("/")

    def resolve(self, value: str) -> str:
        """A path from the kubeconfig: relative ones are relative to its directory."""
        return value if os.path.isabs(value) else os.path.normpath(os.path.join(self.base, value))

    def read(self, field_: str, value: str, what: str) -> tuple[bytes, str]:
        resolved = self.resolve(value)
        try:
            data = _read_file(resolved)
        except OSError as exc:
            relative = "" if os.path.isabs(value) else \
                f" (relative paths are resolved against {self.base})"
            raise self.error(field_, f"cannot read {what} {resolved}: {exc.strerror}; fix the "
                             f"path{relative} or the file's permissions") from None
        return data, resolved

    def decode_data(self, field_: str, value: object) -> bytes:
        try:
            return base64.b64decode(str(value), validate=True)
        except (binascii.Error, ValueError):
            raise self.error(field_, "not valid base64; put the base64 encoding of the PEM "
                             "file here (base64 -w0 FILE)") from None

    def ssl_context(self, cluster: dict, where: str) -> tuple[ssl.SSLContext, str]:
        skip = cluster.get("insecure-skip-tls-verify")
        if skip is True or str(skip).lower() == "true":
            raise self.error(f"{where}.insecure-skip-tls-verify", "true is refused: pykubelet "
                             "always verifies the API server's certificate; remove it and set "
                             "certificate-authority or certificate-authority-data")
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # CERT_REQUIRED, check_hostname
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2  # as client-go
        ctx.set_alpn_protocols(["http/1.1"])
        if cluster.get("certificate-authority-data"):
            field_ = f"{where}.certificate-authority-data"
            pem = self.decode_data(field_, cluster["certificate-authority-data"])
            source = f"{field_} in kubeconfig {self.path}"
        elif cluster.get("certificate-authority"):
            field_ = f"{where}.certificate-authority"
            pem, resolved = self.read(field_, str(cluster["certificate-authority"]), "the CA file")
            source = f"certificate-authority {resolved} (kubeconfig {self.path})"
        else:
            ctx.load_default_certs(ssl.Purpose.SERVER_AUTH)
            return ctx, "the system's trusted CAs (no certificate-authority in the kubeconfig)"
        if b"-----BEGIN CERTIFICATE-----" not in pem:
            raise self.error(field_, f"no PEM certificate in {source}; give the cluster's CA "
                             "certificate (-----BEGIN CERTIFICATE-----)")
        try:
            ctx.load_verify_locations(cadata=pem.decode("ascii", "replace"))
        except ssl.SSLError as exc:
            raise self.error(field_, f"{source} is not a valid CA certificate ({exc.reason or exc}); "
                             "give the cluster's CA certificate in PEM") from None
        return ctx, source

    def client_certificate(self, ctx: ssl.SSLContext, user: dict, name: str) -> ClientCertificate | None:
        where = f"users[{name}]"
        cert_field, key_field = f"{where}.client-certificate", f"{where}.client-key"
        if user.get("client-certificate-data"):
            cert_field += "-data"
            cert = self.decode_data(cert_field, user["client-certificate-data"])
            cert_source = f"client-certificate-data of user {name!r} in kubeconfig {self.path}"
        elif user.get("client-certificate"):
            cert, resolved = self.read(cert_field, str(user["client-certificate"]), "the certificate")
            cert_source = resolved
        else:
            cert = cert_source = None
        if user.get("client-key-data"):
            key_field += "-data"
            key = self.decode_data(key_field, user["client-key-data"])
        elif user.get("client-key"):
            key, _ = self.read(key_field, str(user["client-key"]), "the key")
        else:
            key = None
        if cert is None and key is None:
            return None
        if cert is None:
            raise self.error(f"{where}.client-certificate", "required with client-key; set "
                             "client-certificate or client-certificate-data")
        if key is None:
            raise self.error(f"{where}.client-key", "required with client-certificate; set "
                             "client-key or client-key-data")
        if b"-----BEGIN CERTIFICATE-----" not in cert:
            raise self.error(cert_field, f"no PEM certificate in {cert_source}; give the "
                             "kubelet's client certificate (-----BEGIN CERTIFICATE-----)")
        if b"PRIVATE KEY-----" not in key:
            raise self.error(key_field, "no PEM private key (-----BEGIN ... PRIVATE KEY-----); "
                             "give the key of the client certificate")
        self._load_cert_chain(ctx, cert, key, cert_field, key_field)
        cn, orgs, not_after = certificate_subject(cert)
        return ClientCertificate(source=cert_source, common_name=cn, organizations=orgs,
                                 not_after=not_after)

    def _load_cert_chain(self, ctx: ssl.SSLContext, cert: bytes, key: bytes,
                         cert_field: str, key_field: str) -> None:
        def refuse_password() -> bytes:
            raise self.error(key_field, "the key is encrypted; pykubelet cannot prompt for a "
                             "password: give an unencrypted key (mode 0600)")

        with _private_file(cert) as cert_path, _private_file(key) as key_path:
            try:
                ctx.load_cert_chain(cert_path, key_path, password=refuse_password)
            except ssl.SSLError as exc:
                if exc.reason == "KEY_VALUES_MISMATCH":
                    raise self.error(key_field, f"the key does not match the certificate "
                                     f"({cert_field}); use the key the certificate was issued "
                                     "for") from None
                raise self.error(f"{cert_field} / {key_field}", "cannot load the certificate "
                                 f"and key ({exc.reason or exc}); give PEM files") from None

    def token(self, user: dict, where: str) -> tuple[str | None, str | None]:
        """(token, tokenFile path): a static token wins over tokenFile, as in client-go."""
        if user.get("token"):
            return str(user["token"]).strip(), None
        if not user.get("tokenFile"):
            return None, None
        field_ = f"{where}.tokenFile"
        data, resolved = self.read(field_, str(user["tokenFile"]), "the token file")
        try:
            token = data.decode("utf-8").strip()
        except UnicodeDecodeError:
            token = ""
        if not token:
            raise self.error(field_, f"{resolved} holds no token; write the bearer token "
                             "into it (one line of text)")
        return token, resolved


def _read_file(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


@contextlib.contextmanager
def _private_file(data: bytes) -> Iterator[str]:
    """A path holding `data` that only this process can read, gone when the block ends.

    ssl has no in-memory load for a certificate chain, so the key goes to an anonymous
    memory file (memfd, never on disk) or, without memfd, a 0600 temp file.
    """
    if hasattr(os, "memfd_create") and os.path.isdir("/proc/self/fd"):
        fd = os.memfd_create("pykubelet-tls", os.MFD_CLOEXEC)
        try:
            os.write(fd, data)
            yield f"/proc/self/fd/{fd}"
        finally:
            os.close(fd)
        return
    fd, tmp = tempfile.mkstemp(prefix="pykubelet-tls-")  # mode 0600
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        yield tmp
    finally:
        os.unlink(tmp)
