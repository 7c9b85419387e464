"""The pod and QoS cgroups, kept as the Go kubelet's cgroupfs driver keeps them (pkg/kubelet/cm
through runc's libcontainer fs and fs2 writers): the folders in every cgroup v1 hierarchy or in
the v2 unified tree, their limits, their processes and their numbers. Sync calls on the cgroup
filesystem: the pod cgroup manager runs them in a worker thread.
"""

from __future__ import annotations

import errno
import logging
import math
import os
import signal
import time
from dataclasses import dataclass, field

from pykubelet.pods.backoff import ExponentialBackoff
from pykubelet.pods.stats_summary import UNLIMITED_MEMORY
from pykubelet.ports.node_stats import (
    MEMORY_STAT_KEYS,
    cgroup_memory,
    parse_flat_keyed,
    parse_int,
    parse_mount_lines,
    read_text,
)

log = logging.getLogger("pykubelet.cgroups")

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
_REMOVE_TRIES, _REMOVE_FIRST_DELAY = 5, 0.010  # runc's RemovePaths: 10 ms doubling, 5 tries
_KILL_TRIES = 5  # Go's tryKillingCgroupProcesses


class CgroupError(Exception):
    """A cgroup operation that failed; the message names the cgroup, the file and the fix."""

    def __init__(self, path: str, file: str, reason: str, *, errno: int | None = None):
        super().__init__(f"cgroup {path}: {file}: {reason}")
        self.path = path
        self.file = file
        self.reason = reason
        self.errno = errno


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


@dataclass(frozen=True)
class CgroupConfig:
    """A cgroup's limits (Go's ResourceConfig, as libcontainer takes it). None leaves a file
    as it is (a new cgroup starts unlimited); -1 writes "unlimited" explicitly. Hugepage sizes
    are named as the cgroup files name them ("2MB", "1GB"); every size of the host not named
    here is limited to 0, as Go's maybeSetHugetlb does."""

    cpu_shares: int | None = None
    cpu_quota: int | None = None  # microseconds per period; -1: unlimited
    cpu_period: int | None = None  # microseconds
    memory_limit: int | None = None  # bytes; -1: unlimited
    pids_limit: int | None = None  # -1: max
    hugepage_limits: dict[str, int] = field(default_factory=dict)  # bytes by page size


@dataclass(frozen=True)
class MemoryUsage:
    usage_bytes: int
    working_set_bytes: int  # usage - inactive file, floored at 0 (cAdvisor's)
    limit_bytes: int | None  # None: unlimited


@dataclass(frozen=True)
class CgroupWrite:
    """One file write of a config: `optional` ones are skipped where the kernel lacks the file."""

    controller: str
    file: str
    value: str
    optional: bool = False


# -- decisions (pure) ------------------------------------------------------------------------


def cpu_weight_from_shares(shares: int) -> int:
    """cgroup v2 cpu.weight [1, 10000] from v1 cpu.shares [2, 262144] (Go's getCPUWeight)."""
    if shares >= 262144:
        return 10000
    return 1 + ((max(shares, 2) - 2) * 9999) // 262142


def cpu_max_text(quota: int | None, period: int | None) -> str | None:
    """cgroup v2 cpu.max as runc's fs2 writes it: "<quota|max> [<period>]"; an unset or
    negative quota is "max"; None when neither is set (the file is left alone)."""
    if quota is None and period is None:
        return None
    text = str(quota) if quota is not None and quota > 0 else "max"
    return f"{text} {period}" if period else text


def hugepage_size_name(kb: int) -> str:
    """/sys/kernel/mm/hugepages/hugepages-2048kB -> "2MB", as the hugetlb files name it."""
    size, units = kb, ("KB", "MB", "GB", "TB", "PB")
    unit = 0
    while size >= 1024 and size % 1024 == 0 and unit < len(units) - 1:
        size //= 1024
        unit += 1
    return f"{size}{units[unit]}"


def resource_writes(config: CgroupConfig, *, version: int, hugepage_sizes: list[str] | None) -> list[CgroupWrite]:
    """The files a config writes, in order (runc's Set); `hugepage_sizes` None: no hugetlb
    controller, and hugepage limits are skipped as Go skips them."""
    w: list[CgroupWrite] = []
    unlimited = "-1" if version == 1 else "max"
    if version == 1:
        if config.memory_limit is not None:
            w.append(CgroupWrite("memory", "memory.limit_in_bytes", str(config.memory_limit)))
        if config.cpu_shares is not None:
            w.append(CgroupWrite("cpu", "cpu.shares", str(config.cpu_shares)))
        if config.cpu_period is not None:
            w.append(CgroupWrite("cpu", "cpu.cfs_period_us", str(config.cpu_period)))
        if config.cpu_quota is not None:
            w.append(CgroupWrite("cpu", "cpu.cfs_quota_us", str(config.cpu_quota)))
    else:
        if config.memory_limit is not None:
            limit = config.memory_limit
            w.append(CgroupWrite("memory", "memory.max", unlimited if limit < 0 else str(limit)))
        if config.cpu_shares is not None:
            w.append(CgroupWrite("cpu", "cpu.weight", str(cpu_weight_from_shares(config.cpu_shares))))
        cpu_max = cpu_max_text(config.cpu_quota, config.cpu_period)
        if cpu_max is not None:
            w.append(CgroupWrite("cpu", "cpu.max", cpu_max))
    if config.pids_limit is not None:
        w.append(CgroupWrite("pids", "pids.max", "max" if config.pids_limit < 0 else str(config.pids_limit)))
    if hugepage_sizes is not None:
        suffix = "limit_in_bytes" if version == 1 else "max"
        for size in [*hugepage_sizes, *sorted(config.hugepage_limits.keys() - set(hugepage_sizes))]:
            limit = str(config.hugepage_limits.get(size, 0))
            w.append(CgroupWrite("hugetlb", f"hugetlb.{size}.{suffix}", limit))
            w.append(CgroupWrite("hugetlb", f"hugetlb.{size}.rsvd.{suffix}", limit, optional=True))
    return w


# -- reading the node ------------------------------------------------------------------------


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


# -- the manager -----------------------------------------------------------------------------


class CgroupManager:
    """Create, update and destroy cgroups named cgroupfs-style ("/kubepods/burstable/pod<uid>",
    the same name under every v1 hierarchy), and read their processes and numbers."""

    def __init__(self, mode: CgroupMode, driver: str = "cgroupfs", *, hugepages_dir: str = HUGEPAGES_DIR):
        if driver == "systemd":
            raise CgroupError(
                "/", "cgroupDriver",
                "the systemd cgroup driver is not supported by pykubelet (it would create slices "
                "through systemd's D-Bus API); set cgroupDriver: cgroupfs in the kubelet config, "
                "and SystemdCgroup = false in the container runtime's runc options",
            )
        if driver != "cgroupfs":
            raise CgroupError("/", "cgroupDriver", f"unknown cgroup driver {driver!r}; set cgroupDriver: cgroupfs")
        if mode.version not in (1, 2):
            raise CgroupError(
                "/", "/proc/self/mounts",
                "no cgroup hierarchy is mounted; mount cgroup2 at /sys/fs/cgroup "
                "(mount -t cgroup2 none /sys/fs/cgroup) or the v1 controllers under it",
            )
        self.mode = mode
        self.driver = driver
        self._hugepage_sizes = host_hugepage_sizes(hugepages_dir) if "hugetlb" in mode.mount_points else None
        self._v2_needed = [c for c in V2_CONTROLLERS if c in mode.mount_points]

    # -- names to folders

    def _folder(self, controller: str, path: str) -> str:
        rel = _clean(path)
        mount = self.mode.unified if self.mode.version == 2 else self.mode.mount_points[controller]
        return f"{mount}{rel}" if rel != "/" else str(mount)

    def _all_folders(self, path: str) -> list[str]:
        """The cgroup's folder in each hierarchy (v1 hierarchies mounted together once)."""
        if self.mode.version == 2:
            return [self._folder("", path)]
        return sorted({self._folder(c, path) for c in self.mode.mount_points})

    def _file(self, path: str, controller: str, name: str) -> str:
        """The cgroup's file `name` of `controller`, which the node must have."""
        if controller not in self.mode.mount_points:
            where = (f"not mounted (no cgroup v1 hierarchy with {controller} in /proc/self/mounts); "
                     f"mount it at /sys/fs/cgroup/{controller}") if self.mode.version == 1 else (
                     f"not available (not in {self.mode.unified}/cgroup.controllers); enable it in the kernel")
            raise CgroupError(path, name, f"the {controller} controller is {where}")
        return f"{self._folder(controller, path)}/{name}"

    # -- the API

    def exists(self, path: str) -> bool:
        """The cgroup is there in every hierarchy the kubelet needs (v1), or has every
        controller the kubelet needs enabled (v2), as Go's Validate."""
        if self.mode.version == 2:
            enabled = read_text(f"{self._folder('', path)}/cgroup.controllers")
            return enabled is not None and set(self._v2_needed) <= set(enabled.split())
        return all(os.path.isdir(self._folder(c, path)) for c in V1_EXISTS_IN & self.mode.mount_points.keys())

    def create(self, path: str, config: CgroupConfig) -> None:
        """Make the cgroup (and its missing ancestors), then apply `config`."""
        parts = [p for p in _clean(path).split("/") if p]
        if self.mode.version == 2:
            self._create_v2(path, parts)
        else:
            for controller, mount in self.mode.mount_points.items():
                if controller == "devices":
                    continue  # device access is the runtime's (Go sets SkipDevices)
                if controller == "cpuset":
                    self._create_cpuset(path, mount, parts)
                else:
                    _mkdirs(path, mount, parts)
        self.update(path, config)

    def update(self, path: str, config: CgroupConfig) -> None:
        """Write `config`'s limits into the cgroup's files."""
        writes = resource_writes(config, version=self.mode.version, hugepage_sizes=self._hugepage_sizes)
        deferred: tuple[str, str] | None = None
        for i, write in enumerate(writes):
            file = self._file(path, write.controller, write.file)
            if write.optional and not os.path.exists(file):
                continue
            try:
                _write(path, file, write.value)
            except CgroupError as e:
                if write.file == "cpu.cfs_period_us" and e.errno == errno.EINVAL and any(
                        w.file == "cpu.cfs_quota_us" for w in writes[i:]):
                    # A shorter period can break the parent's bound with the old quota until
                    # the new quota is in (runc retries it after the quota).
                    deferred = (file, write.value)
                    continue
                if write.file == "memory.limit_in_bytes" and e.errno == errno.EBUSY:
                    raise self._memory_busy(path, file, write.value) from e
                raise
            if write.file == "cpu.shares":
                _check_shares(path, file, int(write.value))
            if write.file == "cpu.cfs_quota_us" and deferred is not None:
                _write(path, *deferred)
                deferred = None

    def destroy(self, path: str) -> None:
        """Kill the cgroup's processes, then remove its folders (children first) in every
        hierarchy, as Go's podContainerManager.Destroy; gone already is fine."""
        if _clean(path) == "/":
            raise CgroupError(path, self._all_folders(path)[0], "refusing to destroy the root cgroup")
        self._kill_processes(path)
        remaining = self._all_folders(path)
        backoff, last_error = ExponentialBackoff(_REMOVE_FIRST_DELAY, math.inf), ""  # _REMOVE_TRIES bounds it
        for attempt in range(_REMOVE_TRIES):
            if attempt:
                time.sleep(backoff.next_delay())
            for folder in list(remaining):
                try:
                    _remove_tree(folder)
                except OSError as e:
                    last_error = f"{e.strerror} ({e.filename or folder})"
                if not os.path.exists(folder):
                    remaining.remove(folder)
            if not remaining:
                return
        raise CgroupError(
            path, remaining[0],
            f"could not remove the cgroup: {last_error}; processes still in it: {self.pids(path) or 'none'} "
            "(a child cgroup of another owner, or processes that did not die)",
        )

    def pids(self, path: str) -> list[int]:
        """The processes in the cgroup and its children, in any hierarchy (Go's Pids)."""
        found: set[int] = set()
        for folder in self._all_folders(path):
            for directory, _, _ in os.walk(folder):
                text = read_text(f"{directory}/cgroup.procs")
                found.update(int(pid) for pid in (text or "").split() if pid.isdigit())
        return sorted(found)

    def list_children(self, path: str) -> list[str]:
        """The child cgroups' names ("/kubepods/burstable/pod<uid>"), in any hierarchy."""
        names: set[str] = set()
        for folder in self._all_folders(path):
            try:
                names.update(e.name for e in os.scandir(folder) if e.is_dir(follow_symlinks=False))
            except OSError:
                continue
        base = _clean(path).rstrip("/")
        return [f"{base}/{name}" for name in sorted(names)]

    def memory_usage(self, path: str) -> MemoryUsage:
        """Usage, working set (as node_stats and cAdvisor count it) and limit of the cgroup."""
        if self.mode.version == 1:
            usage_name, limit_name = "memory.usage_in_bytes", "memory.limit_in_bytes"
        else:
            usage_name, limit_name = "memory.current", "memory.max"
        usage = _read_int(path, self._file(path, "memory", usage_name))
        stat = parse_flat_keyed(_read(path, self._file(path, "memory", "memory.stat")), MEMORY_STAT_KEYS)
        limit = parse_int(_read(path, self._file(path, "memory", limit_name)))  # v2 "max": None
        if limit is not None and limit > UNLIMITED_MEMORY:
            limit = None  # v1's "unlimited" is a page-rounded LONG_MAX
        memory = cgroup_memory(usage, stat, limit, version=self.mode.version, time=0.0)
        working_set = memory.working_set_bytes if memory and memory.working_set_bytes is not None else usage
        return MemoryUsage(usage_bytes=usage, working_set_bytes=working_set, limit_bytes=limit)

    def cpu_usage_ns(self, path: str) -> int:
        """CPU time the cgroup's processes used, in nanoseconds."""
        if self.mode.version == 1:
            return _read_int(path, self._file(path, "cpuacct", "cpuacct.usage"))
        file = f"{self._folder('', path)}/cpu.stat"  # a core file: there without the cpu controller
        usage = parse_flat_keyed(_read(path, file)).get("usage_usec")
        if usage is None:
            raise CgroupError(path, file, "no usage_usec line in it")
        return usage * 1000

    def pids_current(self, path: str) -> int:
        """The number of tasks (threads too) in the cgroup."""
        return _read_int(path, self._file(path, "pids", "pids.current"))

    # -- helpers with I/O

    def _create_cpuset(self, path: str, mount: str, parts: list[str]) -> None:
        """A new v1 cpuset folder has no cpus and mems, and no process can join it: copy its
        parent's into each level made (runc's cpusetEnsureParent)."""
        parent = mount
        for part in parts:
            current = f"{parent}/{part}"
            _mkdir(path, current)
            for name in ("cpuset.cpus", "cpuset.mems"):
                if not _read(path, f"{current}/{name}").strip():
                    _write(path, f"{current}/{name}", _read(path, f"{parent}/{name}").strip())
            parent = current

    def _create_v2(self, path: str, parts: list[str]) -> None:
        """Make each level, enabling the kubelet's controllers in every ancestor's
        cgroup.subtree_control first (runc's CreateCgroupPath)."""
        current = str(self.mode.unified)
        for part in parts:
            self._enable_controllers(path, current)
            current = f"{current}/{part}"
            _mkdir(path, current)

    def _enable_controllers(self, path: str, folder: str) -> None:
        file = f"{folder}/cgroup.subtree_control"
        missing = [c for c in self._v2_needed if c not in _read(path, file).split()]
        if not missing:
            return
        try:
            _write(path, file, " ".join(f"+{c}" for c in missing))
        except CgroupError:
            for controller in missing:  # find the one the kernel refuses, and say which
                try:
                    _write(path, file, f"+{controller}")
                except CgroupError as e:
                    hint = ("; the cgroup has processes of its own, and cgroup v2 gives no domain "
                            "controller to the children of such a cgroup: move them to a leaf cgroup"
                            if e.errno == errno.EBUSY else "")
                    raise CgroupError(path, file, f"cannot enable +{controller}: {e.reason}{hint}",
                                      errno=e.errno) from e

    def _memory_busy(self, path: str, file: str, value: str) -> CgroupError:
        folder = os.path.dirname(file)
        usage = parse_int(read_text(f"{folder}/memory.usage_in_bytes"))
        peak = parse_int(read_text(f"{folder}/memory.max_usage_in_bytes"))
        return CgroupError(
            path, file,
            f"cannot lower the memory limit to {value} bytes: the cgroup uses {usage} bytes (peak {peak}) "
            "and the kernel could not reclaim enough (EBUSY); set a limit above the usage, or stop "
            "processes in the cgroup first",
            errno=errno.EBUSY,
        )

    def _kill_processes(self, path: str) -> None:
        """SIGKILL every process left in the cgroup, a few tries (Go's tryKillingCgroupProcesses);
        never the kubelet itself."""
        pids = [pid for pid in self.pids(path) if pid != os.getpid()]
        if not pids:
            return
        log.info("killing processes left in cgroup %s: %s", path, pids)
        errors: dict[int, OSError] = {}
        for _ in range(_KILL_TRIES):
            errors = {}
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass  # gone already
                except OSError as e:
                    errors[pid] = e
            if not errors:
                return
            pids = list(errors)
        pid, error = next(iter(errors.items()))
        raise CgroupError(path, self._all_folders(path)[0] + "/cgroup.procs",
                          f"cannot kill process {pid}: {error.strerror}", errno=error.errno)


# -- file I/O: every OSError becomes a CgroupError naming the file ---------------------------


def _clean(path: str) -> str:
    parts = path.split("/")
    if not path.startswith("/") or any(p in (".", "..") for p in parts):
        raise CgroupError(path, path, 'not a cgroup name: give an absolute name such as "/kubepods/burstable"')
    return "/" + "/".join(p for p in parts if p)


def _reason(e: OSError, value: str | None = None) -> str:
    code = e.errno
    if code == errno.ENOENT:
        return ("no such file: the cgroup does not exist (create it first) or its controller is not "
                "enabled for it")
    if code in (errno.EACCES, errno.EPERM):
        return f"{e.strerror}: the kubelet must run as root with the cgroup filesystem mounted read-write"
    if code == errno.EROFS:
        return "the cgroup filesystem is mounted read-only: mount it read-write (a container needs --privileged)"
    if code == errno.EINVAL and value is not None:
        return f"the kernel refused {value!r} (invalid, or beyond what the parent cgroup allows)"
    if code == errno.ENOSPC and value is not None:
        return f"the kernel refused {value!r}: the cgroup's cpuset.cpus or cpuset.mems is empty"
    return e.strerror or str(e)


def _read(path: str, file: str) -> str:
    try:
        with open(file, encoding="utf-8") as f:
            return f.read()
    except OSError as e:
        raise CgroupError(path, file, _reason(e), errno=e.errno) from e


def _read_int(path: str, file: str) -> int:
    value = parse_int(_read(path, file))
    if value is None:
        raise CgroupError(path, file, "not a number")
    return value


def _write(path: str, file: str, value: str) -> None:
    try:
        # One write(2) of the whole value: the kernel parses each write on its own.
        fd = os.open(file, os.O_WRONLY | os.O_CLOEXEC)
        try:
            os.write(fd, value.encode())
        finally:
            os.close(fd)
    except OSError as e:
        raise CgroupError(path, file, _reason(e, value), errno=e.errno) from e


def _check_shares(path: str, file: str, shares: int) -> None:
    """The kernel clamps cpu.shares silently: read it back, as runc does."""
    got = _read_int(path, file)
    if got != shares:
        bound = "maximum" if shares > got else "minimum"
        raise CgroupError(path, file, f"the kernel set {got} for {shares}: the {bound} allowed cpu-shares is {got}")


def _mkdir(path: str, folder: str) -> None:
    try:
        os.mkdir(folder, 0o755)
    except FileExistsError:
        pass
    except OSError as e:
        raise CgroupError(path, folder, _reason(e), errno=e.errno) from e


def _mkdirs(path: str, mount: str, parts: list[str]) -> None:
    if not os.path.isdir(mount):
        raise CgroupError(path, mount, "the hierarchy's mount point is gone; is the cgroup filesystem mounted?")
    folder = mount
    for part in parts:
        folder = f"{folder}/{part}"
        _mkdir(path, folder)


def _remove_tree(folder: str) -> None:
    """rmdir the folder, its child cgroups first when it has any (runc's RemovePath); a
    cgroup folder holds only the kernel's files, which go with it."""
    try:
        os.rmdir(folder)
        return
    except FileNotFoundError:
        return
    except OSError:
        pass
    try:
        children = [e.path for e in os.scandir(folder) if e.is_dir(follow_symlinks=False)]
    except FileNotFoundError:
        return
    for child in children:
        _remove_tree(child)
    try:
        os.rmdir(folder)
    except FileNotFoundError:
        pass
