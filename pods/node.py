"""The Node object and its status, as the Go kubelet builds them (kubelet_node_status.go and
nodestatus/setters.go): labels, capacity, addresses, nodeInfo, the Ready and pressure
conditions, and the strategic merge patch that writes a changed status.

Pure: the node status actor reads the machine into NodeFacts, the health board and the
runtime into the condition inputs, and sends what these functions return.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

import msgspec

from .status import rfc3339

# The Kubernetes version whose kubelet behaviour pykubelet follows. The node reports it with
# pykubelet's own version as semver build metadata (as k3s reports "v1.29.4+k3s1"), so that
# version checks in the control plane see v1.36.0 and people see what runs.
KUBERNETES_VERSION = "v1.36.0"

HOSTNAME_LABEL = "kubernetes.io/hostname"
OS_LABEL = "kubernetes.io/os"
ARCH_LABEL = "kubernetes.io/arch"
# The labels the kubelet owns and sets again on a Node that already exists (Go:
# updateDefaultLabels; the zone, region and instance-type ones come from a cloud provider).
DEFAULT_LABELS = (HOSTNAME_LABEL, OS_LABEL, ARCH_LABEL)

# Labels a kubelet may set on its own Node (Go: kubelet/pkg/apis IsKubeletLabel); any other
# label in the kubernetes.io or k8s.io namespaces is refused by the Go kubelet at startup,
# and node-restriction.kubernetes.io/ by the NodeRestriction admission plugin.
_KUBELET_LABELS = frozenset({
    HOSTNAME_LABEL, OS_LABEL, ARCH_LABEL,
    "topology.kubernetes.io/zone", "topology.kubernetes.io/region",
    "failure-domain.beta.kubernetes.io/zone", "failure-domain.beta.kubernetes.io/region",
    "beta.kubernetes.io/instance-type", "node.kubernetes.io/instance-type",
    "beta.kubernetes.io/os", "beta.kubernetes.io/arch",
})  # fmt: skip
_KUBELET_LABEL_NAMESPACES = ("kubelet.kubernetes.io", "node.kubernetes.io")
_RESTRICTED_NAMESPACES = ("kubernetes.io", "k8s.io")

# Go's GOARCH for what uname reports.
_GOARCH = {
    "x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64",
    "armv7l": "arm", "armv6l": "arm", "i386": "386", "i686": "386",
    "ppc64le": "ppc64le", "s390x": "s390x", "riscv64": "riscv64", "loongarch64": "loong64",
}  # fmt: skip

# Node condition types and the kubelet's reasons and messages for them (Go: setters.go).
READY = "Ready"
MEMORY_PRESSURE = "MemoryPressure"
DISK_PRESSURE = "DiskPressure"
PID_PRESSURE = "PIDPressure"
KUBELET_READY = "KubeletReady"
KUBELET_NOT_READY = "KubeletNotReady"
READY_MESSAGE = "kubelet is posting ready status"

# type: (reason, message) under pressure, then without.
_PRESSURE = {
    MEMORY_PRESSURE: (
        ("KubeletHasInsufficientMemory", "kubelet has insufficient memory available"),
        ("KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
    ),
    DISK_PRESSURE: (
        ("KubeletHasDiskPressure", "kubelet has disk pressure"),
        ("KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
    ),
    PID_PRESSURE: (
        ("KubeletHasInsufficientPID", "kubelet has insufficient PID available"),
        ("KubeletHasSufficientPID", "kubelet has sufficient PID available"),
    ),
}

_HEARTBEAT = "lastHeartbeatTime"
_OWNED_STATUS = ("capacity", "allocatable", "addresses", "nodeInfo", "daemonEndpoints")


class NodeFacts(msgspec.Struct, frozen=True, kw_only=True):
    """What the node status reports about the machine (read by actors/node_status.py)."""

    cpu_count: int
    memory_bytes: int  # MemTotal from /proc/meminfo
    ephemeral_storage_bytes: int  # capacity of the filesystem under --root-dir
    os_image: str  # PRETTY_NAME from /etc/os-release
    kernel_version: str  # uname -r
    machine: str  # uname -m: x86_64, aarch64, ...
    machine_id: str = ""  # /etc/machine-id
    boot_id: str = ""  # /proc/sys/kernel/random/boot_id
    system_uuid: str = ""  # /sys/class/dmi/id/product_uuid, readable by root only


# --- names and quantities ------------------------------------------------------------


def kubelet_version(pykubelet_version: str) -> str:
    """nodeInfo.kubeletVersion: "v1.36.0+pykubelet.0.1.0"."""
    build = "".join(c if c.isalnum() or c in ".-" else "-" for c in pykubelet_version)
    return f"{KUBERNETES_VERSION}+pykubelet.{build}"


def container_runtime_version(runtime_name: str | None, runtime_version: str | None) -> str:
    """nodeInfo.containerRuntimeVersion: "containerd://1.6.20" (Go: "<type>://<version>")."""
    return f"{runtime_name or 'unknown'}://{runtime_version or 'Unknown'}"


def go_arch(machine: str) -> str:
    """uname's machine as Go's GOARCH (the kubernetes.io/arch label): x86_64 -> amd64."""
    return _GOARCH.get(machine, machine)


def binary_quantity(value: int) -> str:
    """A byte count as the API server echoes it (Go's canonical Quantity), so that the
    status read back compares equal: a multiple of 1024 in BinarySI (25276502016 ->
    "24684084Ki", 25769803776 -> "24Gi"); anything else has no binary suffix, which the
    server parses as DecimalSI (2000000 -> "2M", 1000 -> "1k", 107374182913 as is)."""
    if value % 1024 == 0 and abs(value) >= 1024:
        suffixes = ("", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei")
        exponent = 0
        while exponent < len(suffixes) - 1 and value % 1024 == 0:
            value //= 1024
            exponent += 1
        return f"{value}{suffixes[exponent]}"
    suffixes = ("", "k", "M", "G", "T", "P", "E")
    exponent = 0
    while value and exponent < len(suffixes) - 1 and value % 1000 == 0:
        value //= 1000
        exponent += 1
    return f"{value}{suffixes[exponent]}"


def disallowed_node_labels(labels: Mapping[str, str]) -> list[str]:
    """The --node-labels keys the Go kubelet refuses at startup: in the kubernetes.io or
    k8s.io namespaces but not one a kubelet may set (kubelet.kubernetes.io/,
    node.kubernetes.io/, or a listed one such as kubernetes.io/hostname)."""
    refused = []
    for key in labels:
        if key in _KUBELET_LABELS:
            continue
        namespace = key.split("/", 1)[0] if "/" in key else ""
        if any(namespace == ns or namespace.endswith("." + ns) for ns in _KUBELET_LABEL_NAMESPACES):
            continue
        if any(namespace == ns or namespace.endswith("." + ns) for ns in _RESTRICTED_NAMESPACES):
            refused.append(key)
    return sorted(refused)


def node_labels(hostname: str, machine: str, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The labels of a new Node: hostname, os and arch, then --node-labels (which win, as Go)."""
    labels = {HOSTNAME_LABEL: hostname, OS_LABEL: "linux", ARCH_LABEL: go_arch(machine)}
    labels.update(extra or {})
    return labels


# --- the Node ------------------------------------------------------------------------


def node_capacity(facts: NodeFacts, max_pods: int) -> dict[str, int]:
    """The node's capacity in node_allocatable.py's units: cpu in millicores, bytes, pods."""
    return {"cpu": facts.cpu_count * 1000, "ephemeral-storage": facts.ephemeral_storage_bytes,
            "memory": facts.memory_bytes, "pods": max_pods}


def resource_quantities(amounts: Mapping[str, int]) -> dict[str, str]:
    """Amounts as the API server echoes them: cpu "2" or "1900m", bytes in binary_quantity."""
    shown = {}
    for name, amount in sorted(amounts.items()):
        if name == "cpu":
            shown[name] = str(amount // 1000) if amount % 1000 == 0 else f"{amount}m"
        elif name in ("memory", "ephemeral-storage") or name.startswith("hugepages-"):
            shown[name] = binary_quantity(amount)
        else:
            shown[name] = str(amount)
    return shown


def owned_status(
    facts: NodeFacts,
    *,
    hostname: str,
    node_ip: str | Sequence[str],
    max_pods: int = 110,
    kubelet_port: int = 10250,
    runtime_name: str | None = None,
    runtime_version: str | None = None,
    kubelet_version: str = kubelet_version("0"),
    allocatable: Mapping[str, int] | None = None,
) -> dict[str, Any]:
    """The status fields the kubelet sets on every update, conditions aside: capacity and
    allocatable, addresses, nodeInfo, daemonEndpoints. `allocatable` (node_allocatable.py's:
    cpu in millicores, bytes, a pod count) is capacity when None."""
    capacity = resource_quantities(node_capacity(facts, max_pods))
    allocated = resource_quantities(allocatable) if allocatable is not None else dict(capacity)
    ips = [node_ip] if isinstance(node_ip, str) else list(node_ip)
    addresses = [{"type": "InternalIP", "address": ip} for ip in ips]
    addresses.append({"type": "Hostname", "address": hostname})
    return {
        "capacity": capacity,
        "allocatable": allocated,
        "addresses": addresses,
        "nodeInfo": {
            # Go serialises every NodeSystemInfo field, empty or not; the schema requires them.
            "machineID": facts.machine_id,
            "systemUUID": facts.system_uuid,
            "bootID": facts.boot_id,
            "kernelVersion": facts.kernel_version,
            "osImage": facts.os_image,
            "containerRuntimeVersion": container_runtime_version(runtime_name, runtime_version),
            "kubeletVersion": kubelet_version,
            "kubeProxyVersion": "",  # deprecated; the Go kubelet leaves it empty since 1.31
            "operatingSystem": "linux",
            "architecture": go_arch(facts.machine),
        },
        "daemonEndpoints": {"kubeletEndpoint": {"Port": kubelet_port}},
    }


def initial_node(
    name: str,
    *,
    labels: Mapping[str, str],
    status: Mapping[str, Any],
    conditions: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """The Node the kubelet POSTs to register (Go: initialNode): `labels` from node_labels,
    `status` from owned_status, `conditions` from node_conditions."""
    full_status = copy.deepcopy(dict(status))
    full_status["conditions"] = [dict(c) for c in conditions]
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": dict(labels)},
        "spec": {},
        "status": full_status,
    }


def merge_status(old_status: Mapping[str, Any], owned: Mapping[str, Any], conditions: Sequence[Mapping]) -> dict:
    """The new status: the old one with the kubelet's fields set and its conditions. What
    others wrote stays: capacity and allocatable keys the kubelet does not set (extended
    resources), images, volumes, other conditions (node_conditions keeps those)."""
    new = copy.deepcopy(dict(old_status))
    for key, value in owned.items():
        if key in ("capacity", "allocatable"):
            new[key] = {**(old_status.get(key) or {}), **value}
        else:
            new[key] = copy.deepcopy(value)
    new["conditions"] = [dict(c) for c in conditions]
    return new


def reconcile_existing(existing: Mapping[str, Any], initial: Mapping[str, Any]) -> dict[str, Any] | None:
    """The patch for a Node that already existed when the kubelet registered (Go:
    tryRegisterWithAPIServer): the default labels set again (--node-labels and foreign
    labels are left alone, as Go) and the kubelet's status fields; None if all match."""
    labels = dict((existing.get("metadata") or {}).get("labels") or {})
    wanted = initial["metadata"].get("labels") or {}
    for key in DEFAULT_LABELS:
        if key in wanted:
            if wanted[key]:
                labels[key] = wanted[key]
            else:
                labels.pop(key, None)
    old_status = existing.get("status") or {}
    owned = {k: v for k, v in initial["status"].items() if k in _OWNED_STATUS}
    new_status = merge_status(old_status, owned, old_status.get("conditions") or [])
    if "conditions" not in old_status:
        del new_status["conditions"]
    old_labels = (existing.get("metadata") or {}).get("labels") or {}
    patch = _diff({"metadata": {"labels": old_labels}, "status": old_status},
                  {"metadata": {"labels": labels}, "status": new_status}, ())  # fmt: skip
    return patch or None


# --- conditions ----------------------------------------------------------------------


def _aggregate(errors: list[str]) -> str:
    """Go's utilerrors.NewAggregate(...).Error(): one message as is, more as "[a, b]"."""
    unique = list(dict.fromkeys(errors))
    return unique[0] if len(unique) == 1 else "[" + ", ".join(unique) + "]"


def ready_condition(
    previous: Mapping[str, Any] | None,
    *,
    now: float,
    runtime_ok: bool,
    runtime_detail: str = "",
    network_ok: bool = True,
    network_detail: str = "",
    pleg_ok: bool = True,
    pleg_detail: str = "",
) -> dict[str, Any]:
    """Ready: KubeletReady, or KubeletNotReady naming what fails (Go: ReadyCondition, with
    runtimeState's errors: runtime, then PLEG, then network)."""
    errors = []
    if not runtime_ok:
        errors.append("container runtime is down" + (f": {runtime_detail}" if runtime_detail else ""))
    if not pleg_ok:
        errors.append("PLEG is not healthy" + (f": {pleg_detail}" if pleg_detail else ""))
    if not network_ok:
        errors.append("container runtime network not ready" + (f": {network_detail}" if network_detail else ""))
    stamp = rfc3339(now)
    status, reason, message = ("False", KUBELET_NOT_READY, _aggregate(errors)) if errors else (
        "True", KUBELET_READY, READY_MESSAGE)  # fmt: skip
    transition = stamp
    if previous is not None and previous.get("status") == status and previous.get("lastTransitionTime"):
        transition = previous["lastTransitionTime"]
    return {
        "type": READY,
        "status": status,
        "lastHeartbeatTime": stamp,
        "lastTransitionTime": transition,
        "reason": reason,
        "message": message,
    }


def pressure_condition(kind: str, previous: Mapping[str, Any] | None, *, now: float, pressure: bool) -> dict:
    """MemoryPressure, DiskPressure or PIDPressure: the heartbeat moves; reason, message and
    transition time change only when the status flips (Go: *PressureCondition)."""
    stamp = rfc3339(now)
    status = "True" if pressure else "False"
    condition = dict(previous) if previous is not None else {"type": kind, "status": "Unknown"}
    condition[_HEARTBEAT] = stamp
    if condition.get("status") != status:
        reason, message = _PRESSURE[kind][0 if pressure else 1]
        condition.update(status=status, reason=reason, message=message, lastTransitionTime=stamp)
    return condition


def node_conditions(
    previous: Sequence[Mapping[str, Any]] | None,
    *,
    now: float,
    runtime_ok: bool,
    runtime_detail: str = "",
    network_ok: bool = True,
    network_detail: str = "",
    pleg_ok: bool = True,
    pleg_detail: str = "",
    memory_pressure: bool = False,
    disk_pressure: bool = False,
    pid_pressure: bool = False,
) -> list[dict[str, Any]]:
    """The node's conditions after one update, from the previous ones (the Node's in the
    API). Conditions of other writers stay where they are; the kubelet's are updated in
    place, or appended in Go's order (MemoryPressure, DiskPressure, PIDPressure, Ready).

    `now` is Unix seconds. `network_detail` reads as Go prints a runtime condition:
    "NetworkReady=false reason:NetworkPluginNotReady message:cni plugin not initialized".
    """
    by_type = {c.get("type"): c for c in previous or ()}
    ours = {
        MEMORY_PRESSURE: pressure_condition(MEMORY_PRESSURE, by_type.get(MEMORY_PRESSURE), now=now,
                                            pressure=memory_pressure),
        DISK_PRESSURE: pressure_condition(DISK_PRESSURE, by_type.get(DISK_PRESSURE), now=now, pressure=disk_pressure),
        PID_PRESSURE: pressure_condition(PID_PRESSURE, by_type.get(PID_PRESSURE), now=now, pressure=pid_pressure),
        READY: ready_condition(
            by_type.get(READY), now=now, runtime_ok=runtime_ok, runtime_detail=runtime_detail,
            network_ok=network_ok, network_detail=network_detail, pleg_ok=pleg_ok, pleg_detail=pleg_detail,
        ),
    }  # fmt: skip
    result = [ours.pop(c.get("type")) if c.get("type") in ours else dict(c) for c in previous or ()]
    result.extend(ours.values())  # dicts keep insertion order: Go's setter order
    return result


# --- writing the status ----------------------------------------------------------------


def _without_heartbeats(status: Mapping[str, Any]) -> dict[str, Any]:
    stripped = dict(status)
    conditions = stripped.get("conditions") or []
    stripped["conditions"] = sorted(
        ({k: v for k, v in c.items() if k != _HEARTBEAT} for c in conditions), key=lambda c: str(c.get("type"))
    )
    return stripped


def status_changed(old_status: Mapping[str, Any], new_status: Mapping[str, Any]) -> bool:
    """Whether anything but the conditions' heartbeat times differs (Go: nodeStatusHasChanged)."""
    return _without_heartbeats(old_status) != _without_heartbeats(new_status)


def status_patch(
    old_status: Mapping[str, Any], new_status: Mapping[str, Any], *, heartbeat: bool = False
) -> dict[str, Any] | None:
    """The strategic merge patch for nodes/{name}/status that turns `old_status` into
    `new_status`, shaped as Go's PatchNodeStatus sends it: {"status": {...}} with changed
    conditions merged by type (changed fields and the type, "$setElementOrder/conditions"),
    changed addresses replaced whole ("$patch": "replace", as Go works around their merge
    key), maps merged key by key (null removes a key), other lists replaced.

    None when nothing but heartbeat times changed, unless `heartbeat` (the report due every
    --node-status-report-frequency), and None when nothing changed at all.
    """
    if not heartbeat and not status_changed(old_status, new_status):
        return None
    patch = _diff({"status": dict(old_status)}, {"status": dict(new_status)}, ())
    return patch or None


def needs_report(last_report_at: float | None, now: float, changed: bool, report_frequency: float = 300.0) -> bool:
    """Whether to write the status: on a change, or when --node-status-report-frequency has
    passed since the last write (Go: tryUpdateNodeStatus). Times on one monotonic clock."""
    return changed or last_report_at is None or now - last_report_at >= report_frequency


# --- the two-way strategic merge diff, for the fields of a Node the kubelet writes ----------


def _diff(old: Mapping[str, Any], new: Mapping[str, Any], path: tuple[str, ...]) -> dict[str, Any]:
    patch: dict[str, Any] = {}
    for key, value in new.items():
        here = path + (key,)
        if key not in old:
            patch[key] = copy.deepcopy(value)
        elif old[key] == value:
            continue
        elif isinstance(value, Mapping) and isinstance(old[key], Mapping):
            inner = _diff(old[key], value, here)
            if inner:
                patch[key] = inner
        elif here == ("status", "conditions") and isinstance(value, list) and isinstance(old[key], list):
            patch.update(_merge_list_by_type(key, old[key], value))
        elif here == ("status", "addresses") and isinstance(value, list) and old[key]:
            patch[key] = copy.deepcopy(value) + [{"$patch": "replace"}]
        else:
            patch[key] = copy.deepcopy(value)
    for key in old:
        if key not in new:
            patch[key] = None
    return patch


def _merge_list_by_type(key: str, old: list, new: list) -> dict[str, Any]:
    old_by_type = {item.get("type"): item for item in old if isinstance(item, Mapping)}
    new_types = {item.get("type") for item in new if isinstance(item, Mapping)}
    items: list[dict[str, Any]] = []
    for item in new:
        before = old_by_type.get(item.get("type"))
        if before is None:
            items.append(copy.deepcopy(item))
        elif before != item:
            changed = _diff(before, item, ())
            items.append({**changed, "type": item.get("type")})
    for item_type in old_by_type:
        if item_type not in new_types:
            items.append({"$patch": "delete", "type": item_type})
    order_changed = [i.get("type") for i in old] != [i.get("type") for i in new]
    if not items and not order_changed:
        return {}
    return {f"$setElementOrder/{key}": [{"type": item.get("type")} for item in new], key: items}
