"""The kubelet API's TLS: the serving certificate from --tls-cert-file/--tls-private-key-file,
or, as the Go kubelet does without them, a self-signed one made once in --cert-dir
(kubelet.crt, kubelet.key) for the node's name and IPs; and the ssl context with the
client CA, the minimum TLS version and the cipher suites of the configuration.

The self-signed pair is made by a child process (`python -m pykubelet.ports.serving_cert`):
cryptography maps about 9 MB into a process that imports it, and the daemon would keep
them for its whole life to use them once (docs/performance.md, "110 pods at rest").
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import ssl
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass

CERT_FILE, KEY_FILE = "kubelet.crt", "kubelet.key"
VALIDITY = datetime.timedelta(days=365)  # Go's GenerateSelfSignedCertKey: one year

# Go's tls.VersionName -> Python's
TLS_VERSIONS = {
    "VersionTLS12": ssl.TLSVersion.TLSv1_2,
    "VersionTLS13": ssl.TLSVersion.TLSv1_3,
}
# Go's cipher suite names (TLS 1.2; TLS 1.3 suites are not configurable, as in Go) -> OpenSSL's.
CIPHER_SUITES = {
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256": "ECDHE-ECDSA-AES128-GCM-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384": "ECDHE-ECDSA-AES256-GCM-SHA384",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305": "ECDHE-ECDSA-CHACHA20-POLY1305",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-ECDSA-CHACHA20-POLY1305",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256": "ECDHE-RSA-AES128-GCM-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384": "ECDHE-RSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305": "ECDHE-RSA-CHACHA20-POLY1305",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-RSA-CHACHA20-POLY1305",
}


class ServingCertError(ValueError):
    """A certificate, key or TLS setting that cannot be used; names the file or field."""


@dataclass(frozen=True)
class TlsSettings:
    cert_file: str = ""  # tlsCertFile ("" with key_file "": self-signed in cert_dir)
    key_file: str = ""  # tlsPrivateKeyFile
    cert_dir: str = ""  # --cert-dir
    client_ca_file: str = ""  # authentication.x509.clientCAFile
    min_version: str = ""  # tlsMinVersion ("": Go's default, TLS 1.2)
    cipher_suites: tuple[str, ...] = ()  # tlsCipherSuites (): Go's defaults


def serving_cert_files(settings: TlsSettings, *, node_name: str, node_ips: Sequence[str]) -> tuple[str, str]:
    """The certificate and key files to serve with, making the self-signed pair first when
    no files are configured and --cert-dir holds none yet (Go keeps and re-uses it)."""
    if settings.cert_file or settings.key_file:
        if not (settings.cert_file and settings.key_file):
            raise ServingCertError("tlsCertFile and tlsPrivateKeyFile: give both, or neither (a self-signed "
                                   "certificate is then made in --cert-dir)")
        return settings.cert_file, settings.key_file
    cert = os.path.join(settings.cert_dir, CERT_FILE)
    key = os.path.join(settings.cert_dir, KEY_FILE)
    if not (os.path.exists(cert) and os.path.exists(key)):
        _make_in_child(settings.cert_dir, node_name, node_ips)
    return cert, key


def write_self_signed(cert_dir: str, host: str, ips: Sequence[str]) -> None:
    """kubelet.crt and kubelet.key in cert_dir, from self_signed (the child's work)."""
    cert_pem, key_pem = self_signed(host, ips)
    os.makedirs(cert_dir, mode=0o700, exist_ok=True)
    _write(os.path.join(cert_dir, KEY_FILE), key_pem, 0o600)
    _write(os.path.join(cert_dir, CERT_FILE), cert_pem, 0o644)


CHILD_TIMEOUT = 60.0  # seconds: an import and two EC keys take about 0.2 s


def _make_in_child(cert_dir: str, host: str, ips: Sequence[str]) -> None:
    argv = [sys.executable, "-m", __name__, cert_dir, host, *ips]
    try:
        done = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=CHILD_TIMEOUT)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ServingCertError(f"self-signed serving certificate in {cert_dir}: {exc}") from exc
    if done.returncode != 0:
        why = done.stderr.decode(errors="replace").strip().splitlines() or [f"exit code {done.returncode}"]
        raise ServingCertError(f"self-signed serving certificate in {cert_dir}: {why[-1]}; give tlsCertFile "
                               "and tlsPrivateKeyFile, or fix --cert-dir")


def self_signed(host: str, ips: Sequence[str], *, now: datetime.datetime | None = None) -> tuple[bytes, bytes]:
    """Go's GenerateSelfSignedCertKey: a CA "<host>-ca@<unix time>" and a serving certificate
    "<host>@<unix time>" signed by it for the host name and the IPs (and localhost); the
    PEM holds the serving certificate, then the CA's."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = now or datetime.datetime.now(datetime.timezone.utc)
    stamp = int(now.timestamp())
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{host}-ca@{stamp}")])
    ca = (
        x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number()).not_valid_before(now).not_valid_after(now + VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=False, content_commitment=False,
                                     key_encipherment=False, data_encipherment=False, key_agreement=False,
                                     encipher_only=False, decipher_only=False), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    names: list[x509.GeneralName] = [x509.DNSName(host)]
    if host != "localhost":
        names.append(x509.DNSName("localhost"))
    for ip in dict.fromkeys([*ips, "127.0.0.1"]):
        names.append(x509.IPAddress(ipaddress.ip_address(ip)))
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{host}@{stamp}")]))
        .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now).not_valid_after(now + VALIDITY)
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    pem = cert.public_bytes(serialization.Encoding.PEM) + ca.public_bytes(serialization.Encoding.PEM)
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
                                serialization.NoEncryption())
    return pem, key_pem


def server_context(settings: TlsSettings, cert_file: str, key_file: str) -> ssl.SSLContext:
    """The kubelet API's ssl context: its certificate, client certificates asked for (and
    verified against clientCAFile when one is set; authentication decides what a missing
    one means), tlsMinVersion and tlsCipherSuites."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        context.load_cert_chain(cert_file, key_file)
    except (OSError, ssl.SSLError) as exc:
        raise ServingCertError(f"serving certificate {cert_file} / key {key_file}: {exc}") from exc
    if settings.min_version:
        if settings.min_version not in TLS_VERSIONS:
            raise ServingCertError(f"tlsMinVersion {settings.min_version!r}: one of {', '.join(TLS_VERSIONS)}")
        context.minimum_version = TLS_VERSIONS[settings.min_version]
    else:
        context.minimum_version = ssl.TLSVersion.TLSv1_2
    if settings.cipher_suites:
        unknown = [c for c in settings.cipher_suites if c not in CIPHER_SUITES]
        if unknown:
            raise ServingCertError(f"tlsCipherSuites: {', '.join(unknown)} not supported; use some of "
                                   f"{', '.join(sorted(CIPHER_SUITES))}")
        context.set_ciphers(":".join(dict.fromkeys(CIPHER_SUITES[c] for c in settings.cipher_suites)))
    if settings.client_ca_file:
        try:
            context.load_verify_locations(settings.client_ca_file)
        except (OSError, ssl.SSLError) as exc:
            raise ServingCertError(f"authentication.x509.clientCAFile {settings.client_ca_file}: {exc}") from exc
        context.verify_mode = ssl.CERT_OPTIONAL  # a request may also come with a token
        # Validity is checked by authentication, so that an expired certificate gets the
        # Go kubelet's 401 rather than a failed handshake (OpenSSL's X509_V_FLAG_NO_CHECK_TIME).
        context.verify_flags |= 0x200000
    return context


def _write(path: str, data: bytes, mode: int) -> None:
    fd = os.open(path + ".tmp", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "wb") as file:
        file.write(data)
    os.replace(path + ".tmp", path)


if __name__ == "__main__":  # the child of _make_in_child: CERT_DIR HOST [IP ...]
    try:
        write_self_signed(sys.argv[1], sys.argv[2], sys.argv[3:])
    except ImportError as exc:
        sys.exit(f"the cryptography package cannot be imported ({exc}): install it")
    except (OSError, ValueError) as exc:
        sys.exit(str(exc))
