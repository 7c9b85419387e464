"""The cgroups port: the pod and QoS cgroups kept as the Go kubelet's cgroupfs driver keeps
them, on cgroup v1 or v2 (which the node has: mode.py; the limits' files: limits.py; the
manager that creates, updates, destroys and reads them: manager.py)."""

from .errors import CgroupError
from .limits import CgroupConfig
from .manager import CgroupManager, MemoryUsage
from .mode import CgroupMode, detect_cgroup_mode

__all__ = [
    "CgroupConfig",
    "CgroupError",
    "CgroupManager",
    "CgroupMode",
    "MemoryUsage",
    "detect_cgroup_mode",
]
