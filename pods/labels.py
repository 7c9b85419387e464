"""CRI labels and annotations on sandboxes and containers, as the Go kubelet sets them.

The pod workers write them when they create a sandbox or a container; the PLEG and the
pod workers read them back after a restart to re-adopt what is already running. Only
objects carrying MANAGED_LABEL are ever touched by pykubelet.
"""

from __future__ import annotations

import functools
import json

import msgspec

from pykubelet.messages.pod import Container, ContainerPort, Pod

POD_NAME_LABEL = "io.kubernetes.pod.name"
POD_NAMESPACE_LABEL = "io.kubernetes.pod.namespace"
POD_UID_LABEL = "io.kubernetes.pod.uid"
CONTAINER_NAME_LABEL = "io.kubernetes.container.name"
MANAGED_LABEL = "io.pykubelet.managed"
MANAGED_VALUE = "true"

CONTAINER_HASH_ANNOTATION = "io.kubernetes.container.hash"
RESTART_COUNT_ANNOTATION = "io.kubernetes.container.restartCount"
TERMINATION_MESSAGE_PATH_ANNOTATION = "io.kubernetes.container.terminationMessagePath"
TERMINATION_MESSAGE_POLICY_ANNOTATION = "io.kubernetes.container.terminationMessagePolicy"
POD_DELETION_GRACE_PERIOD_ANNOTATION = "io.kubernetes.pod.deletionGracePeriod"
POD_TERMINATION_GRACE_PERIOD_ANNOTATION = "io.kubernetes.pod.terminationGracePeriod"
PRESTOP_HANDLER_ANNOTATION = "io.kubernetes.container.preStopHandler"
CONTAINER_PORTS_ANNOTATION = "io.kubernetes.container.ports"
CONTAINER_TYPE_ANNOTATION = "io.kubernetes.container.type"

# Values of CONTAINER_TYPE_ANNOTATION.
INIT_CONTAINER = "init"
APP_CONTAINER = "container"

# What the API server's defaulting puts in a container spec; a Go kubelet records the
# defaulted values, so records them here too when a manifest left them out.
DEFAULT_TERMINATION_MESSAGE_PATH = "/dev/termination-log"
DEFAULT_TERMINATION_MESSAGE_POLICY = "File"

_POD_IDENTITY_LABELS = (POD_NAME_LABEL, POD_NAMESPACE_LABEL, POD_UID_LABEL)


# --- writing ---------------------------------------------------------------------------


def sandbox_labels(pod: Pod) -> dict[str, str]:
    """The pod's own labels, plus the pod identity and the pykubelet ownership mark."""
    labels = dict(pod.metadata.labels)
    labels[POD_NAME_LABEL] = pod.metadata.name
    labels[POD_NAMESPACE_LABEL] = pod.metadata.namespace
    labels[POD_UID_LABEL] = pod.metadata.uid
    labels[MANAGED_LABEL] = MANAGED_VALUE
    return labels


def sandbox_annotations(pod: Pod) -> dict[str, str]:
    """The pod's annotations, unchanged (Go: newPodAnnotations)."""
    return dict(pod.metadata.annotations)


def container_labels(pod: Pod, container: Container) -> dict[str, str]:
    """Pod identity and container name: all a relist needs to group containers by pod."""
    return {
        POD_NAME_LABEL: pod.metadata.name,
        POD_NAMESPACE_LABEL: pod.metadata.namespace,
        POD_UID_LABEL: pod.metadata.uid,
        CONTAINER_NAME_LABEL: container.name,
        MANAGED_LABEL: MANAGED_VALUE,
    }


def container_annotations(pod: Pod, container: Container, restart_count: int) -> dict[str, str]:
    """What the kubelet must know about a container it did not start in this process:
    the spec hash it was made from, its restart count, how to stop it."""
    annotations = {
        CONTAINER_HASH_ANNOTATION: container_hash(container),
        RESTART_COUNT_ANNOTATION: str(restart_count),
        TERMINATION_MESSAGE_PATH_ANNOTATION: container.termination_message_path
        or DEFAULT_TERMINATION_MESSAGE_PATH,
        TERMINATION_MESSAGE_POLICY_ANNOTATION: container.termination_message_policy
        or DEFAULT_TERMINATION_MESSAGE_POLICY,
    }
    if pod.metadata.deletion_grace_period_seconds is not None:
        annotations[POD_DELETION_GRACE_PERIOD_ANNOTATION] = str(pod.metadata.deletion_grace_period_seconds)
    if pod.spec.termination_grace_period_seconds is not None:
        annotations[POD_TERMINATION_GRACE_PERIOD_ANNOTATION] = str(pod.spec.termination_grace_period_seconds)
    if container.lifecycle is not None and container.lifecycle.pre_stop is not None:
        annotations[PRESTOP_HANDLER_ANNOTATION] = msgspec.json.encode(container.lifecycle.pre_stop).decode()
    if container.ports:
        annotations[CONTAINER_PORTS_ANNOTATION] = _ports_json(container.ports)
    if any(c.name == container.name for c in pod.spec.init_containers):
        annotations[CONTAINER_TYPE_ANNOTATION] = INIT_CONTAINER
    elif any(c.name == container.name for c in pod.spec.containers):
        annotations[CONTAINER_TYPE_ANNOTATION] = APP_CONTAINER
    return annotations


def _ports_json(ports: list[ContainerPort]) -> str:
    # Go's json.Marshal of []v1.ContainerPort: field order and omitempty as in the API type.
    out = []
    for port in ports:
        item: dict[str, object] = {}
        if port.name:
            item["name"] = port.name
        if port.host_port:
            item["hostPort"] = port.host_port
        item["containerPort"] = port.container_port
        item["protocol"] = port.protocol or "TCP"
        if port.host_ip:
            item["hostIP"] = port.host_ip
        out.append(item)
    return json.dumps(out, separators=(",", ":"))


# --- the container hash -----------------------------------------------------------------


def container_hash(container: Container) -> str:
    """The Go kubelet's HashContainer, bit for bit, as the annotation stores it (hex).

    Since Kubernetes 1.31 only name and image are hashed: every other container field is
    immutable in the API, and image is the one field a pod update may change (a pod
    whose spec changes otherwise gets a new UID). Same value as a Go kubelet computes, so
    containers started by either are recognised by both.
    """
    return _hash_of(container.image, container.name)


@functools.lru_cache(maxsize=4096)
def _hash_of(image: str, name: str) -> str:
    # Kept: each sync hashes each container (compute_pod_actions) and each start once more,
    # and the byte-wise FNV below costs about 30 us a call in Python (more on a busy node).
    fields = {"image": image, "name": name}  # json.Marshal sorts map keys
    data = _go_json(fields).encode()
    # hashutil.DeepHashObject prints the []byte with spew's "%#v": ([]uint8)[123 34 ...]
    printed = "([]uint8)[" + " ".join(str(b) for b in data) + "]"
    return format(_fnv32a(printed.encode()), "x")


def _go_json(value: dict[str, str]) -> str:
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False, sort_keys=True)
    # Go escapes HTML-significant characters and the two JavaScript line separators.
    for char in "<>&\u2028\u2029":
        text = text.replace(char, f"\\u{ord(char):04x}")
    return text


def _fnv32a(data: bytes) -> int:
    h = 0x811C9DC5
    for byte in data:
        h ^= byte
        h = (h * 0x01000193) & 0xFFFFFFFF
    return h


# --- reading back -----------------------------------------------------------------------


def is_managed(labels: dict[str, str]) -> bool:
    """True for a sandbox or container pykubelet created (and may therefore touch)."""
    return labels.get(MANAGED_LABEL) == MANAGED_VALUE


def pod_identity(labels: dict[str, str]) -> tuple[str, str, str] | None:
    """(uid, name, namespace) from a sandbox's or container's labels; None without a uid."""
    uid = labels.get(POD_UID_LABEL, "")
    if not uid:
        return None
    return uid, labels.get(POD_NAME_LABEL, ""), labels.get(POD_NAMESPACE_LABEL, "")


def pod_labels(labels: dict[str, str]) -> dict[str, str]:
    """A sandbox's labels without the ones the kubelet added: the pod's own labels."""
    return {k: v for k, v in labels.items() if k not in _POD_IDENTITY_LABELS and k != MANAGED_LABEL}


def restart_count(annotations: dict[str, str]) -> int:
    """The restart count annotation; 0 when missing or malformed, as in Go."""
    try:
        return int(annotations.get(RESTART_COUNT_ANNOTATION, "0"))
    except ValueError:
        return 0
