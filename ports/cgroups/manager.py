"""The pod and QoS cgroups, kept as the Go kubelet's cgroupfs driver keeps them (pkg/kubelet/cm
through runc's libcontainer fs and fs2 writers): create, update, destroy, and read their
processes and numbers. Sync calls: the container manager runs them in a worker thread."""

from __future__ import annotations

import errno
import logging
import math
import os
import signal
import time
from dataclasses import dataclass

from pykubelet.pods.backoff import ExponentialBackoff
from pykubelet.pods.stats_summary import UNLIMITED_MEMORY
from pykubelet.ports.node_stats import MEMORY_STAT_KEYS, cgroup_memory, parse_flat_keyed, parse_int, read_text

from . import files
from .errors import CgroupError
from .limits import CgroupConfig, resource_writes
from .mode import HUGEPAGES_DIR, V1_EXISTS_IN, V2_CONTROLLERS, CgroupMode, host_hugepage_sizes

log = logging.getLogger("pykubelet.cgroups")

_REMOVE_TRIES, _REMOVE_FIRST_DELAY = 5, 0.010  # runc's RemovePaths: 10 ms doubling, 5 tries
_KILL_TRIES = 5  # Go's tryKillingCgroupProcesses


@dataclass(frozen=True)
class MemoryUsage:
    usage_bytes: int
    working_set_bytes: int  # usage - inactive file, floored at 0 (cAdvisor's)
    limit_bytes: int | None  # None: unlimited


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
        return _under(self.mode.unified if self.mode.version == 2 else self.mode.mount_points[controller], path)

    def _all_folders(self, path: str) -> list[str]:
        """The cgroup's folder in each hierarchy (v1 hierarchies mounted together once). On a
        hybrid host the unified tree's too: runc makes each container's cgroup there as
        well, and with it the pod's folders, which Go's libcontainer counts among a
        cgroup's paths and removes on Destroy."""
        if self.mode.version == 2:
            return [self._folder("", path)]
        folders = {self._folder(c, path) for c in self.mode.mount_points}
        if self.mode.hybrid:
            folders.add(_under(self.mode.unified, path))
        return sorted(folders)

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
        parts = [p for p in files.clean(path).split("/") if p]
        if self.mode.version == 2:
            self._create_v2(path, parts)
        else:
            for controller, mount in self.mode.mount_points.items():
                if controller == "devices":
                    continue  # device access is the runtime's (Go sets SkipDevices)
                if controller == "cpuset":
                    self._create_cpuset(path, mount, parts)
                else:
                    files.mkdirs(path, mount, parts)
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
                files.write(path, file, write.value)
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
                files.check_shares(path, file, int(write.value))
            if write.file == "cpu.cfs_quota_us" and deferred is not None:
                files.write(path, *deferred)
                deferred = None

    def destroy(self, path: str) -> None:
        """Kill the cgroup's processes, then remove its folders (children first) in every
        hierarchy, as Go's podContainerManager.Destroy; gone already is fine."""
        if files.clean(path) == "/":
            raise CgroupError(path, self._all_folders(path)[0], "refusing to destroy the root cgroup")
        self._kill_processes(path)
        remaining = self._all_folders(path)
        backoff, last_error = ExponentialBackoff(_REMOVE_FIRST_DELAY, math.inf), ""  # _REMOVE_TRIES bounds it
        for attempt in range(_REMOVE_TRIES):
            if attempt:
                time.sleep(backoff.next_delay())
            for folder in list(remaining):
                try:
                    files.remove_tree(folder)
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
        base = files.clean(path).rstrip("/")
        return [f"{base}/{name}" for name in sorted(names)]

    def memory_usage(self, path: str) -> MemoryUsage:
        """Usage, working set (as node_stats and cAdvisor count it) and limit of the cgroup."""
        if self.mode.version == 1:
            usage_name, limit_name = "memory.usage_in_bytes", "memory.limit_in_bytes"
        else:
            usage_name, limit_name = "memory.current", "memory.max"
        usage = files.read_int(path, self._file(path, "memory", usage_name))
        stat = parse_flat_keyed(files.read(path, self._file(path, "memory", "memory.stat")), MEMORY_STAT_KEYS)
        limit = parse_int(files.read(path, self._file(path, "memory", limit_name)))  # v2 "max": None
        if limit is not None and limit > UNLIMITED_MEMORY:
            limit = None  # v1's "unlimited" is a page-rounded LONG_MAX
        memory = cgroup_memory(usage, stat, limit, version=self.mode.version, time=0.0)
        working_set = memory.working_set_bytes if memory and memory.working_set_bytes is not None else usage
        return MemoryUsage(usage_bytes=usage, working_set_bytes=working_set, limit_bytes=limit)

    def cpu_usage_ns(self, path: str) -> int:
        """CPU time the cgroup's processes used, in nanoseconds."""
        if self.mode.version == 1:
            return files.read_int(path, self._file(path, "cpuacct", "cpuacct.usage"))
        file = f"{self._folder('', path)}/cpu.stat"  # a core file: there without the cpu controller
        usage = parse_flat_keyed(files.read(path, file)).get("usage_usec")
        if usage is None:
            raise CgroupError(path, file, "no usage_usec line in it")
        return usage * 1000

    def pids_current(self, path: str) -> int:
        """The number of tasks (threads too) in the cgroup."""
        return files.read_int(path, self._file(path, "pids", "pids.current"))

    # -- helpers with I/O

    def _create_cpuset(self, path: str, mount: str, parts: list[str]) -> None:
        """A new v1 cpuset folder has no cpus and mems, and no process can join it: copy its
        parent's into each level made (runc's cpusetEnsureParent).

        Writing cpuset.cpus into a folder whose cpuset.sched_load_balance is on (the
        default) makes the kernel rebuild the scheduler domains of the whole node under a
        global lock: 1.1 ms here when idle, 5-50 ms while runc creates containers' cgroups
        at the same time, on every pod start. While the root cpuset balances load, the
        node is one scheduler domain and no other cpuset's flag matters (the kernel's
        cgroup-v1/cpusets.rst, "sched_load_balance"), so a new level has the flag turned
        off before its cpus are written, and the rebuild is skipped (0.08 ms). On a node
        whose root does not balance load (where the flag does matter) it is left alone."""
        balanced = files.read(path, f"{mount}/cpuset.sched_load_balance").strip() == "1"
        parent = mount
        for part in parts:
            current = f"{parent}/{part}"
            files.mkdir(path, current)
            for name in ("cpuset.cpus", "cpuset.mems"):
                if not files.read(path, f"{current}/{name}").strip():
                    if name == "cpuset.cpus" and balanced:
                        files.write(path, f"{current}/cpuset.sched_load_balance", "0")
                    files.write(path, f"{current}/{name}", files.read(path, f"{parent}/{name}").strip())
            parent = current

    def _create_v2(self, path: str, parts: list[str]) -> None:
        """Make each level, enabling the kubelet's controllers in every ancestor's
        cgroup.subtree_control first (runc's CreateCgroupPath)."""
        current = str(self.mode.unified)
        for part in parts:
            self._enable_controllers(path, current)
            current = f"{current}/{part}"
            files.mkdir(path, current)

    def _enable_controllers(self, path: str, folder: str) -> None:
        file = f"{folder}/cgroup.subtree_control"
        missing = [c for c in self._v2_needed if c not in files.read(path, file).split()]
        if not missing:
            return
        try:
            files.write(path, file, " ".join(f"+{c}" for c in missing))
        except CgroupError:
            for controller in missing:  # find the one the kernel refuses, and say which
                try:
                    files.write(path, file, f"+{controller}")
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


def _under(mount: str, path: str) -> str:
    """The cgroup `path`'s folder in the hierarchy mounted at `mount`."""
    rel = files.clean(path)
    return f"{mount}{rel}" if rel != "/" else str(mount)
