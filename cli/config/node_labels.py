"""--node-labels as Go checks them (ValidateKubeletFlags, k8s.io/kubelet/pkg/apis): label
syntax, and the only keys a kubelet may set in the kubernetes.io and k8s.io namespaces."""

from __future__ import annotations

import re
from typing import Sequence

from .errors import quote

_LABEL_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
# Labels a kubelet may set on its own Node in the kubernetes.io and k8s.io namespaces.
KUBELET_LABELS = frozenset({
    "kubernetes.io/hostname", "kubernetes.io/os", "kubernetes.io/arch",
    "topology.kubernetes.io/zone", "topology.kubernetes.io/region",
    "failure-domain.beta.kubernetes.io/zone", "failure-domain.beta.kubernetes.io/region",
    "node.kubernetes.io/instance-type", "beta.kubernetes.io/instance-type",
    "beta.kubernetes.io/os", "beta.kubernetes.io/arch",
})  # fmt: skip
KUBELET_LABEL_NAMESPACES = ("kubelet.kubernetes.io", "node.kubernetes.io")


def label_problem(key: str, value: str) -> str | None:
    prefix, slash, name = key.rpartition("/")
    if not name or len(name) > 63 or not _LABEL_NAME.match(name):
        return (f"label key {quote(key)}: the name part must be 1-63 characters of letters, digits, "
                "'-', '_' or '.', starting and ending with a letter or digit")  # fmt: skip
    if slash and (len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix)):
        return f"label key {quote(key)}: the prefix must be a DNS subdomain such as example.com"
    if value and (len(value) > 63 or not _LABEL_NAME.match(value)):
        return (f"label {key}={value}: the value must be at most 63 characters of letters, digits, "
                "'-', '_' or '.', starting and ending with a letter or digit")  # fmt: skip

    def within(namespaces: Sequence[str]) -> bool:
        return any(prefix == ns or prefix.endswith("." + ns) for ns in namespaces)

    allowed = key in KUBELET_LABELS or within(KUBELET_LABEL_NAMESPACES)
    if within(("kubernetes.io", "k8s.io")) and not allowed:
        return (f"label {quote(key)}: in the kubernetes.io and k8s.io namespaces a kubelet sets only "
                f"keys under {' or '.join(KUBELET_LABEL_NAMESPACES)} and the well-known "
                f"{', '.join(sorted(KUBELET_LABELS))}")  # fmt: skip
    return None
