"""Kubeconfig files through load_kubeconfig: every input is Credentials or a
KubeconfigError naming the file (and the field, when one is at fault)."""

from __future__ import annotations

import base64
import datetime as dt
import os

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from hypothesis import example, given, strategies as st

from pykubelet.ports.apiserver import Credentials, KubeconfigError, load_kubeconfig

from .support import scratch_directory, tried, valid

_DIRECTORY = scratch_directory("pykubelet-fuzz-kubeconfig-")
_KUBECONFIG = os.path.join(_DIRECTORY, "kubeconfig")


def _certificate(common_name: str, org: str | None) -> tuple[bytes, bytes]:
    key = ec.generate_private_key(ec.SECP256R1())
    names = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if org:
        names.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, org))
    now = dt.datetime.now(dt.timezone.utc)
    cert = (
        x509.CertificateBuilder().subject_name(x509.Name(names)).issuer_name(x509.Name(names))
        .public_key(key.public_key()).serial_number(1).not_valid_before(now - dt.timedelta(days=1))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    return cert.public_bytes(serialization.Encoding.PEM), key_pem


CA_PEM, _ = _certificate("fuzz-ca", None)
CLIENT_PEM, CLIENT_KEY = _certificate("system:node:fuzz", "system:nodes")
OTHER_PEM, OTHER_KEY = _certificate("other", None)
for _name, _data in (("ca.crt", CA_PEM), ("client.crt", CLIENT_PEM), ("client.key", CLIENT_KEY), ("token", b"abc\n"), ("empty", b"")):
    with open(os.path.join(_DIRECTORY, _name), "wb") as _f:
        _f.write(_data)


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


pem_blobs = st.sampled_from([CA_PEM, CLIENT_PEM, CLIENT_KEY, OTHER_KEY, b"", b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
                             CLIENT_PEM[:200], b"-----BEGIN PRIVATE KEY-----\nxx\n-----END PRIVATE KEY-----\n"])
files = st.sampled_from(["ca.crt", "client.crt", "client.key", "token", "empty", "missing", "/nonexistent/x", _DIRECTORY, "../" * 3 + "etc"])
servers = st.one_of(
    st.sampled_from(["https://10.0.0.1:6443", "https://api.example:443/prefix/", "http://10.0.0.1", "https://[::1]:6443",
                     "https://[::1", "https://host:port", "https://:6443", "https://h/?q=1", "https://h#f", "", "ftp://x",
                     "https://h:99999", "https://h:-1"]),
    st.text(max_size=30).map(lambda t: "https://" + t),
)
any_scalar = st.none() | st.booleans() | st.integers(-3, 3) | st.text(max_size=8) | st.lists(st.text(max_size=3), max_size=2) | st.dictionaries(st.text(max_size=3), st.integers(), max_size=2)


def maybe(strategy):
    return st.one_of(strategy, strategy, strategy, any_scalar)


clusters = st.fixed_dictionaries({}, optional={
    "server": maybe(servers),
    "certificate-authority-data": maybe(pem_blobs.map(b64) | st.text(max_size=12)),
    "certificate-authority": maybe(files),
    "insecure-skip-tls-verify": maybe(st.sampled_from([True, False, "true", "True", "no"])),
    "tls-server-name": maybe(st.text(max_size=10)),
})
users = st.fixed_dictionaries({}, optional={
    "client-certificate-data": maybe(pem_blobs.map(b64) | st.text(max_size=12)),
    "client-key-data": maybe(pem_blobs.map(b64)),
    "client-certificate": maybe(files),
    "client-key": maybe(files),
    "token": maybe(st.text(max_size=10)),
    "tokenFile": maybe(files),
    "exec": maybe(st.just({"command": "x"})),
    "username": maybe(st.text(max_size=5)),
})
entry_names = st.sampled_from(["a", "b", "kubelet", ""]) | any_scalar


def named(inner: str, body):
    entry = st.fixed_dictionaries({"name": entry_names}, optional={inner: maybe(body)})
    return maybe(st.lists(maybe(entry), max_size=3))


kubeconfigs = st.fixed_dictionaries({}, optional={
    "apiVersion": st.just("v1"),
    "kind": st.just("Config"),
    "current-context": maybe(entry_names),
    "contexts": named("context", st.fixed_dictionaries({}, optional={"cluster": maybe(entry_names), "user": maybe(entry_names)})),
    "clusters": named("cluster", clusters),
    "users": named("user", users),
})


@st.composite
def usable_kubeconfigs(draw) -> dict:
    """A kubeconfig likely to load: one context, its cluster and user, a field or two varied."""
    cluster = {"server": draw(servers), "certificate-authority-data": b64(CA_PEM)}
    user = draw(st.sampled_from([
        {"client-certificate-data": b64(CLIENT_PEM), "client-key-data": b64(CLIENT_KEY)},
        {"client-certificate": "client.crt", "client-key": "client.key"},
        {"client-certificate-data": b64(CLIENT_PEM), "client-key-data": b64(OTHER_KEY)},
        {"token": "abc"}, {"tokenFile": "token"}, {"tokenFile": "empty"}, {},
    ]))
    document = {
        "current-context": "c",
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}],
        "clusters": [{"name": "k", "cluster": cluster}],
        "users": [{"name": "u", "user": user}],
    }
    if draw(st.booleans()):
        section = draw(st.sampled_from([cluster, user]))
        section[draw(st.sampled_from(["server", "certificate-authority", "client-key", "token", "tokenFile"]))] = draw(any_scalar | files)
    return document


def _load(data: bytes):
    with open(_KUBECONFIG, "wb") as f:
        f.write(data)
    tried("kubeconfig")
    try:
        credentials = load_kubeconfig(_KUBECONFIG)
    except KubeconfigError as error:
        assert str(error).startswith(f"kubeconfig {_KUBECONFIG}"), error
        return error
    assert isinstance(credentials, Credentials)
    assert credentials.server.startswith("https://")
    assert credentials.client_certificate is not None or credentials.token is not None
    valid("kubeconfig")
    return credentials


@given(usable_kubeconfigs())
def test_a_near_valid_kubeconfig_is_credentials_or_an_error_naming_the_field(document):
    _load(yaml.safe_dump(document).encode())


@given(kubeconfigs)
@example({"current-context": ["a"], "contexts": []})
@example({"current-context": "a", "contexts": [{"name": "a", "context": {"cluster": ["x"], "user": "u"}}]})
@example({"current-context": "a", "contexts": [{"name": "a", "context": {"cluster": "c", "user": "u"}}],
          "clusters": [{"name": "c", "cluster": {"server": "https://[::1"}}], "users": [{"name": "u", "user": {"token": "t"}}]})
def test_a_kubeconfig_of_any_shape_is_credentials_or_a_kubeconfig_error(document):
    _load(yaml.safe_dump(document).encode())


@given(st.binary(max_size=300) | st.text(max_size=300).map(str.encode))
@example(b"[" * 3000)
@example(b"a: &a [*a]\n")
def test_arbitrary_bytes_are_a_kubeconfig_error(data):
    _load(data)
