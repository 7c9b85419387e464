"""Go durations (metav1.Duration) as the kubelet's config holds them: "1m30s" parsed and
printed exactly as Go's time.ParseDuration and Duration.String, held as seconds; the msgspec
hooks that decode and encode them."""

from __future__ import annotations

import json
import re
from typing import Any


class DurationError(ValueError):
    """A string that Go's time.ParseDuration would refuse."""


class Duration(float):
    """A Go metav1.Duration, in seconds. Decodes from and encodes to "1m30s" strings."""

    def __str__(self) -> str:
        return format_duration(self)

    def __repr__(self) -> str:
        return f"Duration({format_duration(self)!r})"


_NS_PER_UNIT = {
    "ns": 1,
    "us": 1_000,
    "µs": 1_000,  # U+00B5 micro sign
    "μs": 1_000,  # U+03BC Greek mu
    "ms": 1_000_000,
    "s": 1_000_000_000,
    "m": 60 * 1_000_000_000,
    "h": 3600 * 1_000_000_000,
}
_COMPONENT = re.compile(r"(\d*)(?:\.(\d*))?([^\d.]*)")
_DURATION_HINT = 'a Go duration such as "1m30s", "10s" or "500ms" (units h, m, s, ms, us, ns)'


def _quote(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def parse_duration(text: str) -> Duration:
    """Go's time.ParseDuration: "2m", "1m30s", "1.5h", "500ms", "-1s", "0". Raises DurationError."""
    if not isinstance(text, str):
        raise DurationError(f"expected {_DURATION_HINT}, got {type(text).__name__} {text!r}")
    invalid = f"invalid duration {_quote(text)}"
    rest = text
    sign = -1 if rest.startswith("-") else 1
    rest = rest[1:] if rest[:1] in ("-", "+") else rest
    if rest == "0":
        return Duration(0.0)
    if not rest:
        raise DurationError(f"{invalid}: expected {_DURATION_HINT}")
    total_ns = 0
    pos = 0
    while pos < len(rest):
        match = _COMPONENT.match(rest, pos)
        whole, frac, unit = match.group(1), match.group(2), match.group(3)
        if not whole and not frac:
            raise DurationError(f"{invalid}: expected {_DURATION_HINT}")
        if not unit:
            raise DurationError(f"{invalid}: missing unit; expected {_DURATION_HINT}")
        if unit not in _NS_PER_UNIT:
            raise DurationError(f"{invalid}: unknown unit {_quote(unit)}; expected {_DURATION_HINT}")
        scale = _NS_PER_UNIT[unit]
        total_ns += int(whole or 0) * scale
        if frac:
            total_ns += int(frac) * scale // 10 ** len(frac)
        pos = match.end()
    if total_ns > 2**63 - 1:
        raise DurationError(f"{invalid}: longer than Go's maximum of about 292 years")
    return Duration(sign * total_ns / 1e9)


def format_duration(seconds: float) -> str:
    """Go's Duration.String(): 60 -> "1m0s", 0.5 -> "500ms", 5400 -> "1h30m0s", 0 -> "0s"."""
    ns = round(seconds * 1e9)
    if ns == 0:
        return "0s"
    sign, ns = ("-", -ns) if ns < 0 else ("", ns)

    def frac(value: int, digits: int) -> str:
        whole, part = divmod(value, 10**digits)
        tail = f"{part:0{digits}d}".rstrip("0")
        return f"{whole}.{tail}" if tail else str(whole)

    if ns < 1_000:
        return f"{sign}{ns}ns"
    if ns < 1_000_000:
        return f"{sign}{frac(ns, 3)}µs"
    if ns < 1_000_000_000:
        return f"{sign}{frac(ns, 6)}ms"
    hours, ns = divmod(ns, 3600 * 1_000_000_000)
    minutes, ns = divmod(ns, 60 * 1_000_000_000)
    out = f"{frac(ns, 9)}s"
    if hours or minutes:
        out = f"{minutes}m{out}"
    if hours:
        out = f"{hours}h{out}"
    return sign + out


def dec_hook(type_: type, obj: Any) -> Any:
    """msgspec decode hook for Duration (pass to msgspec.convert / msgspec.json.decode)."""
    if type_ is Duration:
        return parse_duration(obj)  # DurationError is a ValueError: msgspec adds the field path
    raise NotImplementedError(f"cannot decode {type_!r}")


def enc_hook(obj: Any) -> Any:
    """msgspec encode hook: a Duration goes out as Go writes it ("1m0s")."""
    if isinstance(obj, Duration):
        return format_duration(obj)
    raise NotImplementedError(f"cannot encode {type(obj)!r}")
