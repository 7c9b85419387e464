"""The kubelet API's TLS: a self-signed certificate made once for the node's name and IPs,
re-used after; configured files used as given; bad TLS settings refused by name."""

from __future__ import annotations

import ipaddress
import subprocess
import sys
import ssl

import pytest
from cryptography import x509

from pykubelet.ports.serving_cert import ServingCertError, TlsSettings, server_context, serving_cert_files


def test_a_self_signed_certificate_is_made_once_for_the_node(tmp_path):
    settings = TlsSettings(cert_dir=str(tmp_path / "pki"))
    cert, key = serving_cert_files(settings, node_name="node1", node_ips=("10.0.0.5",))
    first = open(cert, "rb").read()
    assert oct((tmp_path / "pki" / "kubelet.key").stat().st_mode & 0o777) == "0o600"
    leaf, ca = x509.load_pem_x509_certificates(first)
    names = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.DNSName) == ["node1", "localhost"]
    assert set(names.get_values_for_type(x509.IPAddress)) == {ipaddress.ip_address("10.0.0.5"),
                                                                ipaddress.ip_address("127.0.0.1")}
    assert leaf.issuer == ca.subject and ca.subject.rfc4514_string().startswith("CN=node1-ca@")
    assert serving_cert_files(settings, node_name="node1", node_ips=()) == (cert, key)
    assert open(cert, "rb").read() == first  # kept, not made again
    context = server_context(settings, cert, key)
    assert context.minimum_version == ssl.TLSVersion.TLSv1_2


def test_tls_settings_the_library_cannot_take_are_refused_by_name(tmp_path):
    settings = TlsSettings(cert_dir=str(tmp_path))
    cert, key = serving_cert_files(settings, node_name="n", node_ips=())
    with pytest.raises(ServingCertError, match="tlsMinVersion"):
        server_context(TlsSettings(min_version="VersionTLS10"), cert, key)
    with pytest.raises(ServingCertError, match="tlsCipherSuites: TLS_RSA_WITH_RC4_128_SHA not supported"):
        server_context(TlsSettings(cipher_suites=("TLS_RSA_WITH_RC4_128_SHA",)), cert, key)
    with pytest.raises(ServingCertError, match="give both, or neither"):
        serving_cert_files(TlsSettings(cert_file=cert), node_name="n", node_ips=())
    assert server_context(TlsSettings(min_version="VersionTLS13"), cert, key).minimum_version == ssl.TLSVersion.TLSv1_3


def test_a_certificate_that_cannot_be_made_is_an_error_naming_the_directory_and_why(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(ServingCertError, match=rf"self-signed serving certificate in {blocker}/pki: .*Not a directory"):
        serving_cert_files(TlsSettings(cert_dir=str(blocker / "pki")), node_name="n", node_ips=())


def test_the_child_that_makes_the_certificate_says_when_cryptography_is_missing(tmp_path):
    # The child process of serving_cert_files, with cryptography unimportable.
    child = ("import runpy, sys; sys.modules['cryptography'] = None; "
             "runpy.run_module('pykubelet.ports.serving_cert', run_name='__main__')")
    done = subprocess.run([sys.executable, "-c", child, str(tmp_path), "n"], capture_output=True, text=True)
    assert done.returncode == 1
    assert "the cryptography package cannot be imported" in done.stderr
    assert not (tmp_path / "kubelet.crt").exists()
