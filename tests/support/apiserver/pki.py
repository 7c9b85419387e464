"""Throwaway PKI for the test API server: a CA made at start, the server's certificate for
127.0.0.1, client certificates issued on demand (CN = user, O = groups), and kubeconfig
files that name one identity. Keys are EC P-256: fast to make, accepted by every TLS peer.
"""

from __future__ import annotations

import base64
import datetime
import ipaddress
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

ADMIN_USER = "admin"
MASTERS_GROUP = "system:masters"
NODES_GROUP = "system:nodes"
NODE_USER_PREFIX = "system:node:"


@dataclass(frozen=True)
class Identity:
    """Who a client is to the API server: a user name and its groups."""

    user: str
    groups: tuple[str, ...] = field(default=())

    @classmethod
    def node(cls, node_name: str) -> Identity:
        return cls(NODE_USER_PREFIX + node_name, (NODES_GROUP,))

    @classmethod
    def admin(cls) -> Identity:
        return cls(ADMIN_USER, (MASTERS_GROUP,))

    @classmethod
    def parse(cls, spec: Identity | str) -> Identity:
        """An Identity, or a user name: system:node:<n> joins system:nodes, admin system:masters."""
        if isinstance(spec, Identity):
            return spec
        if spec.startswith(NODE_USER_PREFIX):
            return cls(spec, (NODES_GROUP,))
        if spec == ADMIN_USER:
            return cls.admin()
        return cls(spec)


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL, serialization.NoEncryption()
    )


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


class CertificateAuthority:
    """A self-signed CA that issues server and client certificates."""

    def __init__(self, common_name: str, *, cert_pem: bytes | None = None, key_pem: bytes | None = None) -> None:
        if cert_pem is not None and key_pem is not None:
            self.cert = x509.load_pem_x509_certificate(cert_pem)
            self.key = serialization.load_pem_private_key(key_pem, password=None)
            return
        self.key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
        now = _now()
        self.cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(self.key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=2))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True, content_commitment=False, key_encipherment=False,
                    data_encipherment=False, key_agreement=False, key_cert_sign=True, crl_sign=True,
                    encipher_only=False, decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(self.key.public_key()), critical=False)
            .sign(self.key, hashes.SHA256())
        )

    @property
    def cert_pem(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.PEM)

    @property
    def key_pem(self) -> bytes:
        return _pem_key(self.key)

    def issue(
        self,
        common_name: str,
        organizations: tuple[str, ...] = (),
        *,
        server_ips: tuple[str, ...] = (),
        server_dns: tuple[str, ...] = (),
        expired: bool = False,
    ) -> tuple[bytes, bytes]:
        """(cert_pem, key_pem) for a server (with SANs) or a client (CN = user, O = groups)."""
        key = ec.generate_private_key(ec.SECP256R1())
        attributes = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, org) for org in organizations]
        attributes.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
        now = _now()
        if expired:
            not_before, not_after = now - datetime.timedelta(days=2), now - datetime.timedelta(days=1)
        else:
            not_before, not_after = now - datetime.timedelta(minutes=5), now + datetime.timedelta(days=1)
        server = bool(server_ips or server_dns)
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name(attributes))
            .issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(not_before)
            .not_valid_after(not_after)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH]),
                critical=False,
            )
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self.key.public_key()), critical=False
            )
        )
        if server:
            names: list[x509.GeneralName] = [x509.IPAddress(ipaddress.ip_address(ip)) for ip in server_ips]
            names += [x509.DNSName(dns) for dns in server_dns]
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        cert = builder.sign(self.key, hashes.SHA256())
        return cert.public_bytes(serialization.Encoding.PEM), _pem_key(key)

    def signed(self, cert_der: bytes) -> bool:
        """Whether a certificate (DER) was issued by this CA."""
        try:
            cert = x509.load_der_x509_certificate(cert_der)
            cert.verify_directly_issued_by(self.cert)
        except Exception:  # any parse or signature failure means "not ours"
            return False
        return True


def client_identity(cert_der: bytes) -> tuple[Identity, datetime.datetime, datetime.datetime]:
    """The identity a client certificate names (CN = user, O = groups) and its validity window."""
    cert = x509.load_der_x509_certificate(cert_der)
    cns = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    orgs = cert.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)
    user = str(cns[0].value) if cns else ""
    return (
        Identity(user, tuple(str(o.value) for o in orgs)),
        cert.not_valid_before_utc,
        cert.not_valid_after_utc,
    )


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def write_kubeconfig(
    path: Path,
    *,
    server_url: str,
    ca_pem: bytes,
    user_name: str,
    cert_pem: bytes | None = None,
    key_pem: bytes | None = None,
    token: str | None = None,
    inline: bool = True,
) -> Path:
    """A kubeconfig with one cluster, one user and one current context.

    inline=True embeds certificate-authority-data / client-certificate-data /
    client-key-data (or `token`); inline=False writes the PEMs beside the kubeconfig and
    names them by path (certificate-authority, client-certificate, client-key, tokenFile).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    stem = path.stem
    cluster: dict[str, object] = {"server": server_url}
    user: dict[str, object] = {}
    if inline:
        cluster["certificate-authority-data"] = _b64(ca_pem)
        if cert_pem is not None and key_pem is not None:
            user["client-certificate-data"] = _b64(cert_pem)
            user["client-key-data"] = _b64(key_pem)
        if token is not None:
            user["token"] = token
    else:
        files = {"ca.crt": ca_pem}
        if cert_pem is not None and key_pem is not None:
            files["client.crt"] = cert_pem
            files["client.key"] = key_pem
        if token is not None:
            files["token"] = token.encode()
        written = {}
        for suffix, data in files.items():
            target = path.parent / f"{stem}.{suffix}"
            target.write_bytes(data)
            target.chmod(0o600)
            written[suffix] = str(target)
        cluster["certificate-authority"] = written["ca.crt"]
        if "client.crt" in written:
            user["client-certificate"] = written["client.crt"]
            user["client-key"] = written["client.key"]
        if "token" in written:
            user["tokenFile"] = written["token"]
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "test-apiserver", "cluster": cluster}],
        "users": [{"name": user_name, "user": user}],
        "contexts": [{"name": "test", "context": {"cluster": "test-apiserver", "user": user_name}}],
        "current-context": "test",
        "preferences": {},
    }
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    path.chmod(0o600)
    return path
