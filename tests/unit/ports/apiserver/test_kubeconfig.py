"""load_kubeconfig(): good kubeconfigs become Credentials; each bad one fails with a message
naming the file, the field and the fix."""

from __future__ import annotations

import base64
import datetime as dt
import shutil
import ssl
from pathlib import Path

import pytest

from pykubelet.ports.apiserver import KubeconfigError, load_kubeconfig

from .conftest import kubeconfig_doc, write_kubeconfig
from .pki import Pki

SERVER = "https://127.0.0.1:6443"


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


@pytest.fixture
def confdir(tmp_path: Path, pki: Pki) -> Path:
    """A kubelet's config directory: the kubeconfig next to its pki/ (relative paths)."""
    d = tmp_path / "kubelet"
    shutil.copytree(pki.ca.cert.parent, d / "pki")
    return d


def write(confdir: Path, doc: dict | str) -> str:
    path = confdir / "kubelet.conf"
    if isinstance(doc, str):
        path.write_text(doc)
        return str(path)
    return write_kubeconfig(path, doc)


def relative_doc(**user: object) -> dict:
    return kubeconfig_doc(SERVER, ca="pki/ca.crt", cert="pki/node1.crt", key="pki/node1.key",
                          **user)


# --- good ------------------------------------------------------------------------------


def test_client_certificate_files_resolve_against_the_kubeconfig_directory(confdir: Path) -> None:
    creds = load_kubeconfig(write(confdir, relative_doc()))
    assert creds.server == SERVER
    assert (creds.context, creds.cluster, creds.user) == ("default", "local", "kubelet")
    assert creds.kubeconfig == str(confdir / "kubelet.conf")
    assert creds.ca_source == f"certificate-authority {confdir}/pki/ca.crt (kubeconfig {confdir}/kubelet.conf)"
    cert = creds.client_certificate
    assert cert is not None and cert.source == f"{confdir}/pki/node1.crt"
    assert (cert.common_name, cert.organizations) == ("system:node:node1", ("system:nodes",))
    assert cert.not_after > dt.datetime.now(dt.timezone.utc)
    assert creds.identity == "system:node:node1"
    assert creds.token is None and creds.token_file is None
    ctx = creds.ssl_context
    assert ctx.verify_mode == ssl.CERT_REQUIRED and ctx.check_hostname
    assert ctx.minimum_version == ssl.TLSVersion.TLSv1_2
    assert [c["subject"] for c in ctx.get_ca_certs()] == [((("commonName", "ca"),),)]


def test_data_forms_are_loaded_in_memory(confdir: Path, pki: Pki) -> None:
    doc = kubeconfig_doc(SERVER, **{"client-certificate-data": b64(pki.node1.cert_pem),
                                    "client-key-data": b64(pki.node1.key_pem)})
    doc["clusters"][0]["cluster"]["certificate-authority-data"] = b64(pki.ca.cert_pem)
    kc = write(confdir, doc)
    creds = load_kubeconfig(kc)
    assert creds.ca_source == f"clusters[local].certificate-authority-data in kubeconfig {kc}"
    assert creds.client_certificate.source == f"client-certificate-data of user 'kubelet' in kubeconfig {kc}"
    assert creds.identity == "system:node:node1"


def test_data_forms_win_over_files(confdir: Path, pki: Pki) -> None:
    doc = kubeconfig_doc(SERVER, ca="pki/missing-ca.crt", cert="pki/missing.crt",
                         key="pki/missing.key",
                         **{"client-certificate-data": b64(pki.node1.cert_pem),
                            "client-key-data": b64(pki.node1.key_pem)})
    doc["clusters"][0]["cluster"]["certificate-authority-data"] = b64(pki.ca.cert_pem)
    assert load_kubeconfig(write(confdir, doc)).identity == "system:node:node1"


def test_token_alone_is_enough(confdir: Path) -> None:
    doc = kubeconfig_doc(SERVER, ca="pki/ca.crt", token="abc.def")
    creds = load_kubeconfig(write(confdir, doc))
    assert creds.token == "abc.def" and creds.client_certificate is None
    assert creds.identity is None
    assert creds.describe_user() == "the bearer token"


def test_token_file_is_read_relative_to_the_kubeconfig(confdir: Path) -> None:
    (confdir / "token").write_text("tok-123\n")
    creds = load_kubeconfig(write(confdir, kubeconfig_doc(SERVER, ca="pki/ca.crt", tokenFile="token")))
    assert creds.token == "tok-123"
    assert creds.token_file == str(confdir / "token")


def test_a_server_host_name_is_accepted_without_resolving_it(confdir: Path) -> None:
    # No lookup happens while loading (one would stall here: DNS is off this machine).
    doc = relative_doc()
    doc["clusters"][0]["cluster"]["server"] = "https://api.cluster.invalid:6443/"
    creds = load_kubeconfig(write(confdir, doc))
    assert creds.server == "https://api.cluster.invalid:6443"


def test_tls_server_name_is_kept(confdir: Path) -> None:
    doc = relative_doc()
    doc["clusters"][0]["cluster"]["tls-server-name"] = "kubernetes"
    assert load_kubeconfig(write(confdir, doc)).tls_server_name == "kubernetes"


def test_without_a_ca_the_system_trust_store_is_used(confdir: Path) -> None:
    doc = kubeconfig_doc(SERVER, cert="pki/node1.crt", key="pki/node1.key")
    creds = load_kubeconfig(write(confdir, doc))
    assert creds.ca_source == "the system's trusted CAs (no certificate-authority in the kubeconfig)"


def test_an_expired_certificate_loads_and_says_so(confdir: Path) -> None:
    # The API server, not the loader, refuses it (401); the message then says "expired".
    doc = kubeconfig_doc(SERVER, ca="pki/ca.crt", cert="pki/expired.crt", key="pki/expired.key")
    cert = load_kubeconfig(write(confdir, doc)).client_certificate
    assert cert.not_after < dt.datetime.now(dt.timezone.utc)
    assert cert.describe().startswith(
        f"{confdir}/pki/expired.crt (CN=system:node:node1, O=system:nodes, expired ")


# --- bad -------------------------------------------------------------------------------


def _set(doc: dict, where: str, key: str, value: object) -> dict:
    section = {"cluster": doc["clusters"][0]["cluster"], "user": doc["users"][0]["user"],
               "context": doc["contexts"][0]["context"], "top": doc}[where]
    if value is None:
        section.pop(key, None)
    else:
        section[key] = value
    return doc


BAD = [
    # (id, how to break a good kubeconfig, message after "kubeconfig {kc}")
    ("no current-context", lambda d: _set(d, "top", "current-context", None),
     ": current-context: not set; set it to one of the contexts (default) with "
     "`kubectl config use-context NAME --kubeconfig {kc}`"),
    ("unknown context", lambda d: _set(d, "top", "current-context", "prod"),
     ": current-context: context 'prod' not found (contexts: default); add it under contexts "
     "or set current-context to an existing one"),
    ("unknown cluster", lambda d: _set(d, "context", "cluster", "remote"),
     ": contexts[default].cluster: cluster 'remote' not found (clusters: local); name a "
     "cluster defined under clusters"),
    ("unknown user", lambda d: _set(d, "context", "user", "admin"),
     ": contexts[default].user: user 'admin' not found (users: kubelet); name a user defined "
     "under users"),
    ("no server", lambda d: _set(d, "cluster", "server", None),
     ": clusters[local].server: required; set the API server's URL, e.g. https://10.0.0.1:6443"),
    ("http server", lambda d: _set(d, "cluster", "server", "http://127.0.0.1:8080"),
     ": clusters[local].server: 'http://127.0.0.1:8080' is not an https URL; pykubelet talks "
     "to the API server over TLS only: use https://HOST:PORT"),
    ("insecure", lambda d: _set(d, "cluster", "insecure-skip-tls-verify", True),
     ": clusters[local].insecure-skip-tls-verify: true is refused: pykubelet always verifies "
     "the API server's certificate; remove it and set certificate-authority or "
     "certificate-authority-data"),
    ("missing CA file", lambda d: _set(d, "cluster", "certificate-authority", "pki/nope.crt"),
     ": clusters[local].certificate-authority: cannot read the CA file {dir}/pki/nope.crt: "
     "No such file or directory; fix the path (relative paths are resolved against {dir}) or "
     "the file's permissions"),
    ("CA not PEM", lambda d: _set(d, "cluster", "certificate-authority", "pki/node1.key"),
     ": clusters[local].certificate-authority: no PEM certificate in certificate-authority "
     "{dir}/pki/node1.key (kubeconfig {kc}); give the cluster's CA certificate "
     "(-----BEGIN CERTIFICATE-----)"),
    ("CA data not base64", lambda d: _set(d, "cluster", "certificate-authority-data", "%%%"),
     ": clusters[local].certificate-authority-data: not valid base64; put the base64 encoding "
     "of the PEM file here (base64 -w0 FILE)"),
    ("missing cert file", lambda d: _set(d, "user", "client-certificate", "/nonexistent/node1.crt"),
     ": users[kubelet].client-certificate: cannot read the certificate /nonexistent/node1.crt: "
     "No such file or directory; fix the path or the file's permissions"),
    ("unreadable key", lambda d: _set(d, "user", "client-key", "pki"),
     ": users[kubelet].client-key: cannot read the key {dir}/pki: Is a directory; fix the path "
     "(relative paths are resolved against {dir}) or the file's permissions"),
    ("key of another cert", lambda d: _set(d, "user", "client-key", "pki/lone.key"),
     ": users[kubelet].client-key: the key does not match the certificate "
     "(users[kubelet].client-certificate); use the key the certificate was issued for"),
    ("encrypted key", lambda d: _set(d, "user", "client-key", "pki/encrypted.key"),
     ": users[kubelet].client-key: the key is encrypted; pykubelet cannot prompt for a "
     "password: give an unencrypted key (mode 0600)"),
    ("key is not a key", lambda d: _set(d, "user", "client-key", "pki/node1.crt"),
     ": users[kubelet].client-key: no PEM private key (-----BEGIN ... PRIVATE KEY-----); give "
     "the key of the client certificate"),
    ("cert without key", lambda d: _set(d, "user", "client-key", None),
     ": users[kubelet].client-key: required with client-certificate; set client-key or "
     "client-key-data"),
    ("key without cert", lambda d: _set(d, "user", "client-certificate", None),
     ": users[kubelet].client-certificate: required with client-key; set client-certificate "
     "or client-certificate-data"),
    ("no credentials", lambda d: _set(_set(d, "user", "client-certificate", None), "user",
                                      "client-key", None),
     ": users[kubelet]: no credentials: set client-certificate and client-key (or their -data "
     "forms), token or tokenFile; a kubelet normally uses its client certificate "
     "(CN=system:node:<node name>, O=system:nodes)"),
    ("exec plugin only", lambda d: _set(_set(_set(d, "user", "client-certificate", None), "user",
                                             "client-key", None), "user", "exec",
                                        {"command": "aws"}),
     ": users[kubelet]: no credentials (exec is not supported by pykubelet): set "
     "client-certificate and client-key (or their -data forms), token or tokenFile; a kubelet "
     "normally uses its client certificate (CN=system:node:<node name>, O=system:nodes)"),
    ("empty token file", lambda d: _set(_set(_set(d, "user", "client-certificate", None), "user",
                                             "client-key", None), "user", "tokenFile",
                                        "pki/../empty-token"),
     ": users[kubelet].tokenFile: {dir}/empty-token holds no token; write the bearer token into "
     "it (one line of text)"),
]


@pytest.mark.parametrize("mutate, expected", [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_kubeconfig(confdir: Path, mutate, expected: str) -> None:
    (confdir / "empty-token").write_text("\n")
    kc = write(confdir, mutate(relative_doc()))
    with pytest.raises(KubeconfigError) as caught:
        load_kubeconfig(kc)
    assert str(caught.value) == f"kubeconfig {kc}" + expected.format(kc=kc, dir=confdir)
    assert caught.value.path == kc


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(KubeconfigError) as caught:
        load_kubeconfig(str(tmp_path / "kubelet.conf"))
    assert str(caught.value) == (
        f"kubeconfig {tmp_path}/kubelet.conf: no such file; pass --kubeconfig the path of the "
        "kubelet's kubeconfig (or omit --kubeconfig for standalone mode)")


def test_relative_kubeconfig_path_is_made_absolute(confdir: Path, monkeypatch) -> None:
    write(confdir, relative_doc())
    monkeypatch.chdir(confdir)
    assert load_kubeconfig("kubelet.conf").kubeconfig == str(confdir / "kubelet.conf")


def test_not_yaml(confdir: Path) -> None:
    kc = write(confdir, "clusters: [\n  - name: x\n  cluster: {")
    with pytest.raises(KubeconfigError) as caught:
        load_kubeconfig(kc)
    assert str(caught.value).startswith(f"kubeconfig {kc}: not valid YAML at line ")
    assert str(caught.value).endswith("; fix the file (kubectl config view --kubeconfig FILE shows it)")


def test_not_a_mapping(confdir: Path) -> None:
    kc = write(confdir, "- just\n- a list\n")
    with pytest.raises(KubeconfigError) as caught:
        load_kubeconfig(kc)
    assert str(caught.value) == (
        f"kubeconfig {kc}: not a kubeconfig (expected a mapping with clusters, contexts, users "
        "and current-context)")


def test_certificate_subject_of_something_unexpected_is_unknown() -> None:
    from pykubelet.ports.apiserver._x509 import certificate_subject

    assert certificate_subject(b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n") \
        == (None, (), None)
    assert certificate_subject(b"not pem") == (None, (), None)


def test_a_token_file_is_re_read_after_a_minute_keeping_the_last_good_token(tmp_path: Path) -> None:
    from pykubelet.ports.apiserver.kubeconfig import TokenFile

    path = tmp_path / "token"
    path.write_text("new-token\n")
    token = TokenFile(str(path), "old-token")
    assert token.current() == "old-token"  # read less than a minute ago
    token.read_at -= 61
    assert token.current() == "new-token"
    path.unlink()
    token.read_at -= 61
    assert token.current() == "new-token"
