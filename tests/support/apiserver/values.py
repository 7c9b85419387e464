"""The value formats kube-apiserver canonicalises on decode: resource.Quantity (written
back in its canonical form, "1000m" -> "1", 1024 -> "1Ki"-style binary only when given in
binary), metav1.Time (RFC 3339, whole seconds, UTC) and metav1.MicroTime (microseconds)."""

from __future__ import annotations

import datetime
import math
import time
import re
from fractions import Fraction

QUANTITY_PATTERN = r"^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$"
_NUMBER = re.compile(r"^([+-]?)([0-9]*)(?:\.([0-9]*))?")
_DECIMAL_SUFFIX = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_BINARY_SUFFIX = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_SUFFIX_BY_DECIMAL_EXPONENT = {v: k for k, v in _DECIMAL_SUFFIX.items()}
_SUFFIX_BY_BINARY_EXPONENT = {v: k for k, v in _BINARY_SUFFIX.items()}


class DecodeError(ValueError):
    """A value that does not decode (the real server answers 400 BadRequest)."""


def parse_quantity(text: str) -> tuple[Fraction, str]:
    """(value, format) with format one of DecimalSI, BinarySI, DecimalExponent."""
    match = _NUMBER.match(text)
    if not text or match is None or (not match.group(2) and not match.group(3)):
        raise DecodeError(f"quantities must match the regular expression '{QUANTITY_PATTERN}'")
    sign, whole, frac = match.group(1), match.group(2) or "0", match.group(3) or ""
    suffix = text[match.end():]
    value = Fraction(int(whole + frac) if (whole + frac) else 0, 10 ** len(frac))
    if sign == "-":
        value = -value
    if suffix in _DECIMAL_SUFFIX:
        return value * Fraction(10) ** _DECIMAL_SUFFIX[suffix], "DecimalSI"
    if suffix in _BINARY_SUFFIX:
        return value * 2 ** _BINARY_SUFFIX[suffix], "BinarySI"
    exponent = re.fullmatch(r"[eE]([-+]?[0-9]+)", suffix)
    if exponent:
        return value * Fraction(10) ** int(exponent.group(1)), "DecimalExponent"
    raise DecodeError(f"quantities must match the regular expression '{QUANTITY_PATTERN}'")


def canonical_quantity(raw: str | int | float) -> str:
    """The string kube-apiserver writes back for a quantity (resource.Quantity.String())."""
    text = raw if isinstance(raw, str) else repr(raw) if isinstance(raw, float) else str(raw)
    value, fmt = parse_quantity(text.strip() if isinstance(raw, str) else text)
    # Quantities keep nano precision at most, rounded away from zero.
    nanos = value * 10**9
    nanos_int = math.ceil(abs(nanos)) * (1 if nanos >= 0 else -1)
    if nanos_int == 0:
        return "0"
    if fmt == "BinarySI":
        if -1024 < nanos_int / 10**9 < 1024 or nanos_int % 10**9 != 0:
            fmt = "DecimalSI"
        else:
            amount, exponent = nanos_int // 10**9, 0
            while amount % 1024 == 0 and exponent < 60:
                amount //= 1024
                exponent += 10
            return f"{amount}{_SUFFIX_BY_BINARY_EXPONENT[exponent]}"
    amount, exponent = nanos_int, -9
    while amount % 10 == 0:
        amount //= 10
        exponent += 1
    shift = exponent % 3
    amount *= 10**shift
    exponent -= shift
    if fmt == "DecimalSI" and exponent in _SUFFIX_BY_DECIMAL_EXPONENT:
        return f"{amount}{_SUFFIX_BY_DECIMAL_EXPONENT[exponent]}"
    return f"{amount}" if exponent == 0 else f"{amount}e{exponent}"


_RFC3339 = re.compile(
    r"^(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?([Zz]|[+-]\d{2}:\d{2})$"
)


def parse_time(text: str) -> datetime.datetime:
    match = _RFC3339.match(text) if isinstance(text, str) else None
    if match is None:
        raise DecodeError(f'parsing time "{text}" as "2006-01-02T15:04:05Z07:00": cannot parse')
    year, month, day, hour, minute, second = (int(g) for g in match.groups()[:6])
    micros = int((match.group(7) or "0")[:6].ljust(6, "0"))
    zone = match.group(8)
    if zone in ("Z", "z"):
        tz = datetime.timezone.utc
    else:
        sign = 1 if zone[0] == "+" else -1
        tz = datetime.timezone(sign * datetime.timedelta(hours=int(zone[1:3]), minutes=int(zone[4:6])))
    try:
        moment = datetime.datetime(year, month, day, hour, minute, second, micros, tzinfo=tz)
    except ValueError as exc:
        raise DecodeError(f'parsing time "{text}": {exc}') from None
    return moment.astimezone(datetime.timezone.utc)


def format_time(moment: datetime.datetime) -> str:
    return moment.astimezone(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def format_micro_time(moment: datetime.datetime) -> str:
    return moment.astimezone(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def canonical_time(text: str) -> str:
    return format_time(parse_time(text))


def canonical_micro_time(text: str) -> str:
    return format_micro_time(parse_time(text))


def now() -> datetime.datetime:
    # Through time.time(), so that a simulation that runs the server in-process on a
    # virtual clock (tests/simulation) moves its timestamps too.
    return datetime.datetime.fromtimestamp(time.time(), datetime.timezone.utc)
