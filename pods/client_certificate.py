"""A TLS client certificate checked as Go's x509 authenticator checks it, and the user it
names. Apart from pods/kubelet_auth.py because it needs cryptography (about 9 MB in the
daemon): actors/server/auth.py imports it only when authentication.x509.clientCAFile is set.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from pykubelet.pods.kubelet_auth import CertificateRejected, User


def verify_client_certificate(der: bytes, roots: Sequence[x509.Certificate], now: dt.datetime) -> User | None:
    """The user a TLS client certificate names (CN = user, O = groups), once it is checked
    as Go's x509 authenticator checks it: signed by one of the CA bundle's certificates
    (every one of them a trust anchor), within its validity and the signer's, and usable
    for client authentication. None when valid but without a CN (Go: no user, no error)."""
    try:
        leaf = x509.load_der_x509_certificate(der)
    except ValueError as exc:
        raise CertificateRejected(f"not an X.509 certificate: {exc}") from None
    issuer = _signer(leaf, roots)
    if issuer is None:
        raise CertificateRejected(f"certificate of {_subject(leaf)} signed by unknown authority "
                                  f"{leaf.issuer.rfc4514_string()!r}")  # fmt: skip
    for cert in (leaf, issuer):
        if not cert.not_valid_before_utc <= now <= cert.not_valid_after_utc:
            raise CertificateRejected(
                f"certificate of {_subject(cert)} has expired or is not yet valid: current time "
                f"{now:%Y-%m-%dT%H:%M:%SZ} is outside {cert.not_valid_before_utc:%Y-%m-%dT%H:%M:%SZ}"
                f"..{cert.not_valid_after_utc:%Y-%m-%dT%H:%M:%SZ}")
        if not _allows_client_auth(cert):
            raise CertificateRejected(f"certificate of {_subject(cert)} specifies an incompatible "
                                      "key usage (no clientAuth)")  # fmt: skip
    names = leaf.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    if not names or not names[0].value:
        return None
    groups = tuple(str(a.value) for a in leaf.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME))
    return User(str(names[0].value), groups=groups)


def _signer(leaf: x509.Certificate, roots: Sequence[x509.Certificate]) -> x509.Certificate | None:
    for root in roots:
        if root.subject != leaf.issuer:
            continue
        try:
            leaf.verify_directly_issued_by(root)
        except (ValueError, TypeError, InvalidSignature):
            continue
        return root
    return None


def _allows_client_auth(cert: x509.Certificate) -> bool:
    try:
        usages = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    except x509.ExtensionNotFound:
        return True  # no extended key usage: any use (Go, RFC 5280)
    return ExtendedKeyUsageOID.CLIENT_AUTH in usages or ExtendedKeyUsageOID.ANY_EXTENDED_KEY_USAGE in usages


def _subject(cert: x509.Certificate) -> str:
    return repr(cert.subject.rfc4514_string())
