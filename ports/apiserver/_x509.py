"""The subject (CN, O) and expiry of a PEM certificate, read from its DER.

Only for messages (who the API server will take the kubelet for; whether its certificate
expired): ssl has no parser for a local certificate, and three fields do not justify a
dependency. Anything unexpected yields (None, (), None), never an error.
"""

from __future__ import annotations

import datetime as dt
import ssl


_OID_CN = bytes.fromhex("550403")
_OID_O = bytes.fromhex("55040a")


def certificate_subject(pem: bytes) -> tuple[str | None, tuple[str, ...], dt.datetime | None]:
    try:
        text = pem.decode("ascii")
        start = text.index("-----BEGIN CERTIFICATE-----")
        end = text.index("-----END CERTIFICATE-----", start) + len("-----END CERTIFICATE-----")
        der = ssl.PEM_cert_to_DER_cert(text[start:end])
        _, cert, _ = _tlv(der, 0)  # Certificate
        _, tbs, _ = _tlv(der, cert)  # TBSCertificate
        pos = tbs
        tag, _, pos_after = _tlv(der, pos)
        if tag == 0xA0:  # [0] version
            pos = pos_after
        for _ in range(3):  # serialNumber, signature, issuer
            pos = _tlv(der, pos)[2]
        _, validity, pos = _tlv(der, pos)
        not_before_end = _tlv(der, validity)[2]
        not_after = _asn1_time(der, not_before_end)
        _, subject, subject_end = _tlv(der, pos)
        cn, orgs = None, []
        p = subject
        while p < subject_end:  # RDNSequence: SET { SEQUENCE { OID, value } }
            _, rdn, rdn_end = _tlv(der, p)
            q = rdn
            while q < rdn_end:
                _, attr, attr_end = _tlv(der, q)
                _, oid, oid_end = _tlv(der, attr)
                _, value, value_end = _tlv(der, oid_end)
                text_value = der[value:value_end].decode("utf-8", "replace")
                if der[oid:oid_end] == _OID_CN:
                    cn = text_value
                elif der[oid:oid_end] == _OID_O:
                    orgs.append(text_value)
                q = attr_end
            p = rdn_end
        return cn, tuple(orgs), not_after
    except (ValueError, IndexError):
        return None, (), None


def _tlv(der: bytes, pos: int) -> tuple[int, int, int]:
    """(tag, start of content, end of content) of the DER element at pos."""
    tag = der[pos]
    length = der[pos + 1]
    pos += 2
    if length & 0x80:
        n = length & 0x7F
        length = int.from_bytes(der[pos:pos + n], "big")
        pos += n
    if pos + length > len(der):
        raise ValueError("truncated DER")
    return tag, pos, pos + length


def _asn1_time(der: bytes, pos: int) -> dt.datetime:
    tag, start, end = _tlv(der, pos)
    text = der[start:end].decode("ascii")
    fmt = "%y%m%d%H%M%SZ" if tag == 0x17 else "%Y%m%d%H%M%SZ"  # UTCTime / GeneralizedTime
    return dt.datetime.strptime(text, fmt).replace(tzinfo=dt.timezone.utc)
