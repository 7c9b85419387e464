"""Which cgroups the node has: v1 hierarchies or the v2 unified tree, read from its mounts
(runc's GetCgroupMounts), and the huge page sizes its kernel offers."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from pykubelet.ports.node_stats import parse_mount_lines, read_text

from .limits import hugepage_size_name

CGROUP_ROOT = "/sys/fs/cgroup"
HUGEPAGES_DIR = "/sys/kernel/mm/hugepages"
# The controllers of v1 mount options (other options are rw, relatime, clone_children...);
# a named hierarchy ("name=systemd") counts under its name, as runc's GetCgroupMounts has it.
V1_CONTROLLERS = frozenset({
    "cpu", "cpuacct", "cpuset", "memory", "devices", "freezer", "net_cls", "blkio", "perf_event",
    "net_prio", "hugetlb", "pids", "rdma", "misc",
})
# Go's cgroupV1impl.Validate: where a cgroup must exist to exist (hugetlb when mounted).
V1_EXISTS_IN = frozenset({"cpu", "cpuacct", "cpuset", "memory", "systemd", "pids", "hugetlb"})
# Go's getSupportedUnifiedControllers: what the kubelet enables and needs on v2.
V2_CONTROLLERS = ("cpu", "cpuset", "memory", "hugetlb", "pids")


@dataclass(frozen=True)
class CgroupMode:
    """Which cgroups the node has. version 1: each controller's hierarchy (a hybrid host's
    unified mount carries no resource control, as Go's IsCgroup2UnifiedMode has it); 2: the
    unified tree at /sys/fs/cgroup, every controller its root offers mapped to it; 0: none."""

    version: int
    mount_points: dict[str, str] = field(default_factory=dict)  # controller -> mount point
    unified: str | None = None  # the cgroup2 mount, when there is one

    @property
    def hybrid(self) -> bool:
        return self.version == 1 and self.unified is not None


def detect_cgroup_mode(mounts_file: str = "/proc/self/mounts", root: str = CGROUP_ROOT) -> CgroupMode:
    """The node's cgroups from its mounts: v2 when `root` itself is a cgroup2 mount."""
    mounts = parse_mount_lines(read_text(mounts_file) or "")
    at_root = [fstype for point, fstype, _ in mounts if point == root]
    unified = next((point for point, fstype, _ in mounts if fstype == "cgroup2"), None)
    if at_root and at_root[-1] == "cgroup2":  # the last mount on a point is the one seen
        controllers = (read_text(f"{root}/cgroup.controllers") or "").split()
        return CgroupMode(version=2, mount_points={c: root for c in controllers}, unified=root)
    mount_points: dict[str, str] = {}
    for point, fstype, options in mounts:
        if fstype != "cgroup":
            continue
        for option in options:
            name = option.removeprefix("name=")
            if (option in V1_CONTROLLERS or option.startswith("name=")) and name not in mount_points:
                mount_points[name] = point
    return CgroupMode(version=1 if mount_points else 0, mount_points=mount_points, unified=unified)


def host_hugepage_sizes(directory: str = HUGEPAGES_DIR) -> list[str]:
    """The huge page sizes the kernel offers ("2MB", "1GB"), smallest first."""
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    kbs = [int(n[len("hugepages-"):-2]) for n in names if n.startswith("hugepages-") and n.endswith("kB")]
    return [hugepage_size_name(kb) for kb in sorted(kbs)]
