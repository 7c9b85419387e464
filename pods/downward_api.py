"""The downward API: a pod's own fields and its containers' resources as strings, as the
Go kubelet renders them (fieldpath.ExtractFieldPathAsString, ExtractContainerResourceValue).
Pure; pods/env.py calls it for env valueFrom, the downwardAPI volume code for its files.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal

from pykubelet.messages.pod import Container, Pod
from pykubelet.pods.resources import parse_quantity


class DownwardApiError(ValueError):
    """A field path or resource the downward API cannot render; the message names it."""


@dataclass(frozen=True)
class PodFacts:
    """What the kubelet knows about a pod beyond its spec. pod_ips come first-family-first
    (the node's preferred IP family), as Go sorts them; status.podIP is the first."""

    node_name: str
    host_ip: str
    host_ips: tuple[str, ...] = ()
    pod_ips: tuple[str, ...] = ()
    node_allocatable: Mapping[str, str] = field(default_factory=dict)  # {"cpu": "2", "memory": "8Gi"}


# --- fieldRef ----------------------------------------------------------------------------

# Go's ConvertDownwardAPIFieldLabel accepts these; the kubelet renders all but the last three.
_FIELD_LABELS = frozenset({
    "metadata.annotations", "metadata.labels", "metadata.name", "metadata.namespace", "metadata.uid",
    "spec.nodeName", "spec.serviceAccountName", "status.hostIP", "status.hostIPs", "status.podIP",
    "status.podIPs", "spec.restartPolicy", "spec.schedulerName", "status.phase",
})


def field_ref_value(pod: Pod, field_path: str, facts: PodFacts, api_version: str = "v1") -> str:
    """The value of a fieldRef (`metadata.labels['app']`, `status.podIP`); a whole label or
    annotation map renders as the downward API file does: sorted `key="value"` lines."""
    if api_version not in ("", "v1"):  # "" is what the API server defaults to v1
        raise DownwardApiError(f"unsupported pod version: {api_version}")
    subscripted = _split_subscript(field_path)
    if subscripted is not None:
        path, key = subscripted
        if path not in ("metadata.annotations", "metadata.labels"):
            raise DownwardApiError(f"field label does not support subscript: {field_path}")
        # Go validates annotation keys lowercased, label keys as written.
        problem = _qualified_name_error(key.lower() if path == "metadata.annotations" else key)
        if problem:
            raise DownwardApiError(f"invalid key subscript in {field_path}: {problem}")
        values = pod.metadata.annotations if path == "metadata.annotations" else pod.metadata.labels
        return values.get(key, "")
    if field_path == "spec.host":  # the v1 alias old clients send
        field_path = "spec.nodeName"
    if field_path not in _FIELD_LABELS:
        raise DownwardApiError(f"field label not supported: {field_path}")
    host_ips = facts.host_ips or ((facts.host_ip,) if facts.host_ip else ())
    match field_path:
        case "metadata.annotations":
            return format_map(pod.metadata.annotations)
        case "metadata.labels":
            return format_map(pod.metadata.labels)
        case "metadata.name":
            return pod.metadata.name
        case "metadata.namespace":
            return pod.metadata.namespace
        case "metadata.uid":
            return pod.metadata.uid
        case "spec.nodeName":
            return pod.spec.node_name
        case "spec.serviceAccountName":
            return pod.spec.service_account_name
        case "status.hostIP":
            return facts.host_ip or (host_ips[0] if host_ips else "")
        case "status.hostIPs":
            return ",".join(host_ips)
        case "status.podIP":
            return facts.pod_ips[0] if facts.pod_ips else ""
        case "status.podIPs":
            return ",".join(facts.pod_ips)
    raise DownwardApiError(f"unsupported fieldPath: {field_path}")


def _split_subscript(field_path: str) -> tuple[str, str] | None:
    """Go's SplitMaybeSubscriptedPath: "metadata.labels['k']" -> ("metadata.labels", "k")."""
    if not field_path.endswith("']"):
        return None
    path, sep, key = field_path[: -len("']")].partition("['")
    if not sep or not path:
        return None
    return path, key


def format_map(values: Mapping[str, str]) -> str:
    """Go's fieldpath.FormatMap: `key="value"` lines in key order, values Go-quoted."""
    return "\n".join(f"{key}={go_quote(values[key])}" for key in sorted(values))


_GO_ESCAPES = {"\a": r"\a", "\b": r"\b", "\f": r"\f", "\n": r"\n", "\r": r"\r", "\t": r"\t",
               "\v": r"\v", "\\": r"\\", '"': r"\""}


def go_quote(text: str) -> str:
    """Go's strconv.Quote (%q): printable runes as they are, the rest escaped."""
    out = []
    for ch in text:
        code = ord(ch)
        if ch in _GO_ESCAPES:
            out.append(_GO_ESCAPES[ch])
        elif ch.isprintable():
            out.append(ch)
        elif code < 0x20 or code == 0x7F:
            out.append(f"\\x{code:02x}")
        elif code < 0x10000:
            out.append(f"\\u{code:04x}")
        else:
            out.append(f"\\U{code:08x}")
    return '"' + "".join(out) + '"'


_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_SUBDOMAIN = re.compile(rf"{_LABEL}(\.{_LABEL})*")


def _qualified_name_error(key: str) -> str:
    """Why `key` is not a qualified name ("example.com/my-key"), or ""."""
    parts = key.split("/")
    if len(parts) > 2:
        return "a qualified name may have at most one '/' (e.g. 'example.com/MyName')"
    if len(parts) == 2:
        prefix = parts[0]
        if not prefix:
            return "prefix part must be non-empty"
        if len(prefix) > 253 or not _SUBDOMAIN.fullmatch(prefix):
            return "prefix part must be a lowercase RFC 1123 subdomain"
    name = parts[-1]
    if not name:
        return "name part must be non-empty"
    if len(name) > 63:
        return "name part must be no more than 63 characters"
    if not _NAME.fullmatch(name):
        return ("name part must consist of alphanumeric characters, '-', '_' or '.', "
                "and must start and end with an alphanumeric character")
    return ""


# --- resourceFieldRef --------------------------------------------------------------------

_STORAGE_LIKE = ("memory", "ephemeral-storage")
# Limits a container leaves unset (or zero) read as the node's allocatable, as Go's
# MergeContainerResourceLimits does; hugepages are never overcommitted, so not them.
_DEFAULTED_LIMITS = ("cpu", "memory", "ephemeral-storage")


def resource_field_value(
    pod: Pod, container_name: str, resource: str, divisor: str | int | float | None, facts: PodFacts
) -> str:
    """A container's `limits.cpu`, `requests.memory`, ... divided by `divisor` (default 1)
    and rounded up, as an integer string: cpu "250m" is "1" core, or "250" with divisor "1m"."""
    container = _find_container(pod, container_name)
    kind, _, name = resource.partition(".")
    supported = name in ("cpu", *_STORAGE_LIKE) or name.startswith("hugepages-")
    if kind not in ("limits", "requests") or not supported:
        raise DownwardApiError(f"unsupported container resource : {resource}")
    resources = container.resources
    values = (resources.limits if kind == "limits" else resources.requests) if resources else {}
    text = values.get(name)
    if kind == "limits" and name in _DEFAULTED_LIMITS and (text is None or _quantity(text, resource) == 0):
        text = facts.node_allocatable.get(name, text)
    amount = _quantity(text, resource) if text is not None else Decimal(0)
    by = _divisor(divisor, resource)
    if name == "cpu":
        # Go divides MilliValue by MilliValue, each rounded up to a whole millicore.
        return str(_ceil_div(_ceil(amount * 1000), _ceil(by * 1000)))
    return str(_ceil_div(_ceil(amount), _ceil(by)))


def _find_container(pod: Pod, name: str) -> Container:
    for container in (*pod.spec.containers, *pod.spec.init_containers):
        if container.name == name:
            return container
    raise DownwardApiError(f"container {name} not found")


def _divisor(divisor: str | int | float | None, resource: str) -> Decimal:
    value = _quantity(str(divisor), resource) if divisor is not None else Decimal(0)
    return value if value != 0 else Decimal(1)  # Go: a zero divisor means 1


def _quantity(text: str, resource: str) -> Decimal:
    try:
        return parse_quantity(text)
    except ValueError as err:
        raise DownwardApiError(f"{resource}: {err}") from None


def _ceil(value: Decimal) -> int:
    return math.ceil(value)


def _ceil_div(numerator: int, denominator: int) -> int:
    return -(-numerator // denominator)
