"""Cgroup names of the kubepods hierarchy, driver-neutral and as each driver writes them
(Go: cm.CgroupName, ToCgroupfs, ToSystemd; the pod and QoS cgroups' names). Pure."""

from __future__ import annotations

from pykubelet.messages.pod import Pod

from .resources import qos_class

CgroupName = tuple[str, ...]
"""A cgroup as its path components, driver-neutral (Go's CgroupName []string)."""

KUBEPODS: CgroupName = ("kubepods",)
POD_CGROUP_PREFIX = "pod"
_SYSTEMD_SUFFIX = ".slice"


def cgroup_name(base: CgroupName, *components: str) -> CgroupName:
    """base extended by components (Go's NewCgroupName). "_" is refused so that the
    systemd form, which turns "-" into "_", can be read back."""
    for component in components:
        if "/" in component or "_" in component:
            raise ValueError(f"cgroup name component {component!r}: may not contain '/' or '_'")
    return (*base, *components)


def qos_cgroup_name(qos: str, root: CgroupName = KUBEPODS) -> CgroupName:
    """The QoS tier's cgroup: Guaranteed pods sit directly under root (kubepods),
    Burstable and BestEffort under root/burstable and root/besteffort."""
    if qos == "Guaranteed":
        return root
    return cgroup_name(root, qos.lower())


def pod_cgroup_name(pod: Pod, root: CgroupName = KUBEPODS) -> CgroupName:
    """The pod's cgroup: "pod<uid>" under its QoS tier."""
    return cgroup_name(qos_cgroup_name(qos_class(pod), root), POD_CGROUP_PREFIX + pod.metadata.uid)


def parse_cgroupfs(path: str) -> CgroupName:
    """A cgroupfs path ("/kubepods/burstable") as a CgroupName; "/" is the root, ()."""
    return tuple(part for part in path.strip("/").split("/") if part)


def cgroupfs_path(name: CgroupName) -> str:
    """The cgroupfs driver's path: "/kubepods/burstable/pod<uid>" (Go's ToCgroupfs)."""
    return "/" + "/".join(name)


def systemd_path(name: CgroupName) -> str:
    """The systemd driver's path (Go's ToSystemd): each level a slice named after all its
    ancestors, "-" in a component escaped to "_":
    /kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid_with_underscores>.slice"""
    path, prefix = "", ""
    for component in name:
        prefix += component.replace("-", "_")
        path += f"/{prefix}{_SYSTEMD_SUFFIX}"
        prefix += "-"
    return path or "/"


def pod_uid_from_cgroup(directory: str, *, systemd: bool) -> str | None:
    """The pod uid in a pod cgroup's directory name found under a QoS cgroup, None when it
    is not a pod's (another QoS tier, a stray directory), as Go's GetAllPodsFromCgroups
    reads them when it looks for the cgroups of pods that no longer exist."""
    last = directory
    if systemd:
        last = directory.removesuffix(_SYSTEMD_SUFFIX).split("-")[-1].replace("_", "-")
    parts = last.split(POD_CGROUP_PREFIX)
    if len(parts) != 2 or not parts[1]:
        return None
    return parts[1]
