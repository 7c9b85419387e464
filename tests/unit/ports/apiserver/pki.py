"""A throwaway PKI for the API-server port's tests: a cluster CA, a server certificate for
127.0.0.1, node client certificates, and the wrong things (another CA, an expired cert,
a key that matches nothing). EC P-256 keys, so that making them takes milliseconds."""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True)
class Pair:
    cert: Path
    key: Path

    @property
    def cert_pem(self) -> bytes:
        return self.cert.read_bytes()

    @property
    def key_pem(self) -> bytes:
        return self.key.read_bytes()


@dataclass(frozen=True)
class Pki:
    ca: Pair  # signs the server and the node client certificates
    other_ca: Pair  # a CA nobody trusts here
    server: Pair  # CN=kube-apiserver, SAN IP 127.0.0.1
    server_elsewhere: Pair  # SAN IP 10.0.0.1 only (wrong address)
    node1: Pair  # CN=system:node:node1, O=system:nodes
    expired: Pair  # node1's certificate, expired
    stranger: Pair  # CN=system:node:node1 signed by other_ca
    lone_key: Path  # a key that belongs to no certificate
    encrypted_key: Path  # node1's key, encrypted with a password


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _name(cn: str, orgs: tuple[str, ...] = ()) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, cn)]
    attrs += [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in orgs]
    return x509.Name(attrs)


def _write(directory: Path, name: str, cert: x509.Certificate, key) -> Pair:
    pair = Pair(directory / f"{name}.crt", directory / f"{name}.key")
    pair.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    pair.key.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    pair.key.chmod(0o600)
    return pair


def _ca(directory: Path, name: str) -> tuple[Pair, x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = _key()
    now = dt.datetime.now(dt.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(name)).issuer_name(_name(name))
        .public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(days=1)).not_valid_after(now + dt.timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                     content_commitment=False, key_encipherment=False,
                                     data_encipherment=False, key_agreement=False,
                                     encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return _write(directory, name, cert, key), cert, key


def _leaf(directory: Path, name: str, ca_cert, ca_key, *, cn: str, orgs: tuple[str, ...] = (),
          ips: tuple[str, ...] = (), server: bool = False, expired: bool = False) -> Pair:
    key = _key()
    now = dt.datetime.now(dt.timezone.utc)
    if expired:
        start, end = now - dt.timedelta(days=10), now - dt.timedelta(days=1)
    else:
        start, end = now - dt.timedelta(days=1), now + dt.timedelta(days=30)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(cn, orgs)).issuer_name(ca_cert.subject)
        .public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(start).not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage(
            [ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH]),
            critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
                       critical=False)
    )
    if ips:
        builder = builder.add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(i)) for i in ips]),
            critical=False)
    return _write(directory, name, builder.sign(ca_key, hashes.SHA256()), key)


def make_pki(directory: Path) -> Pki:
    directory.mkdir(parents=True, exist_ok=True)
    ca, ca_cert, ca_key = _ca(directory, "ca")
    other_ca, other_cert, other_key = _ca(directory, "other-ca")
    node = dict(cn="system:node:node1", orgs=("system:nodes",))
    node1 = _leaf(directory, "node1", ca_cert, ca_key, **node)
    lone = directory / "lone.key"
    lone.write_bytes(_key().private_bytes(serialization.Encoding.PEM,
                                          serialization.PrivateFormat.PKCS8,
                                          serialization.NoEncryption()))
    encrypted = directory / "encrypted.key"
    key = serialization.load_pem_private_key(node1.key_pem, password=None)
    encrypted.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                            serialization.PrivateFormat.PKCS8,
                                            serialization.BestAvailableEncryption(b"secret")))
    return Pki(
        ca=ca,
        other_ca=other_ca,
        server=_leaf(directory, "server", ca_cert, ca_key, cn="kube-apiserver",
                     ips=("127.0.0.1",), server=True),
        server_elsewhere=_leaf(directory, "server-elsewhere", ca_cert, ca_key,
                               cn="kube-apiserver", ips=("10.0.0.1",), server=True),
        node1=node1,
        expired=_leaf(directory, "expired", ca_cert, ca_key, expired=True, **node),
        stranger=_leaf(directory, "stranger", other_cert, other_key, **node),
        lone_key=lone,
        encrypted_key=encrypted,
    )
