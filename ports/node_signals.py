"""The eviction signals read straight from the node (Go's eviction manager takes them from the stats
summary, that is from cAdvisor, whose filesystem discovery fails on virtual disks): memory from
/proc/meminfo and the root memory cgroup, filesystems from statvfs, PIDs from /proc, and each pod's
memory, tasks and disk use for ranking. Sync file reads for a worker thread; actors/eviction calls them.

Nothing here raises for what it cannot read: the signal is left out and a warning logged, at most
once per WARN_EVERY for the same failure, so the eviction manager acts on what it could read.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass

from pykubelet.messages.pod import Pod, Volume
from pykubelet.pods.eviction_ranking import ContainerStorage, FsUsage, PodStorage
from pykubelet.pods.eviction_thresholds import Observation, Signal
from pykubelet.pods.runtime_config import pod_log_directory
from pykubelet.pods.stats_summary import Usage, available_bytes
from pykubelet.ports.cgroups import CgroupError, CgroupManager
from pykubelet.ports.node_stats import (
    CgroupMounts,
    disk_usage,
    files_usage,
    meminfo_memory,
    parse_int,
    parse_meminfo,
    parse_running_tasks,
    read_cgroup,
    read_cgroup_mounts,
    read_text,
    statfs,
)

log = logging.getLogger("pykubelet.eviction.signals")

WARN_EVERY = 600.0  # seconds between two warnings about the same unreadable signal
# The volume folders whose bytes count as the pod's ephemeral storage, laid out as
# actors/volumes/manager.py lays them out (<root>/pods/<uid>/volumes/kubernetes.io~<plugin>/<name>).
EMPTY_DIR_PLUGIN = "kubernetes.io~empty-dir"
CONFIG_MAP_PLUGIN = "kubernetes.io~configmap"


@dataclass(frozen=True)
class PodUsage:
    """What ranking needs of one pod; None where it was not asked for or could not be read."""

    memory_working_set: int | None = None  # bytes, the pod cgroup's
    processes: int | None = None  # tasks (threads included) in the pod cgroup
    storage: PodStorage | None = None


class RateLimitedWarnings:
    """One warning per key per `every` seconds: a file unreadable every pass is said once, not every 10 s."""

    def __init__(self, logger: logging.Logger = log, *, every: float = WARN_EVERY,
                 clock: Callable[[], float] = time.monotonic) -> None:  # fmt: skip
        self.logger = logger
        self.every = every
        self.clock = clock
        self._last: dict[str, float] = {}

    def warn(self, key: str, message: str, *args: object) -> None:
        now = self.clock()
        last = self._last.get(key)
        if last is not None and now - last < self.every:
            return
        self._last[key] = now
        self.logger.warning(message, *args)


class NodeSignalReader:
    """Reads the signals of this node. `cgroups` reads the kubepods and pod cgroups (None: no
    allocatableMemory.available and no per-pod memory or tasks); `proc` and `cgroup_mounts` point
    elsewhere than the machine's in tests."""

    def __init__(
        self,
        *,
        root_dir: str,
        pod_logs_dir: str,
        allocatable_memory: int | None = None,
        kubepods_cgroup: str | None = None,
        cgroups: CgroupManager | None = None,
        proc: str = "/proc",
        cgroup_mounts: CgroupMounts | None = None,
        warnings: RateLimitedWarnings | None = None,
    ) -> None:
        self.root_dir = root_dir
        self.pod_logs_dir = pod_logs_dir
        self.allocatable_memory = allocatable_memory
        self.kubepods_cgroup = kubepods_cgroup
        self.cgroups = cgroups
        self.proc = proc
        self._mounts = cgroup_mounts
        self.warnings = warnings or RateLimitedWarnings()

    @property
    def mounts(self) -> CgroupMounts:
        if self._mounts is None:  # read once, in the worker thread of the first observation
            self._mounts = read_cgroup_mounts(f"{self.proc}/self/mounts")
        return self._mounts

    # -- the node's signals ----------------------------------------------------------------

    def observe(self, *, image_fs: str | None = None, now: float) -> dict[Signal, Observation]:
        """Every signal that could be read, sampled at `now`. `image_fs`: the image filesystem's
        mount point (CRI ImageFsInfo), None when the runtime did not say."""
        readers: list[tuple[str, Callable[[], dict[Signal, Observation]]]] = [
            ("memory.available", lambda: self.memory_available(now)),
            ("allocatableMemory.available", lambda: self.allocatable_memory_available(now)),
            ("nodefs and imagefs", lambda: self.filesystems(image_fs, now)),
            ("pid.available", lambda: self.pid_available(now)),
        ]
        observations: dict[Signal, Observation] = {}
        for name, read in readers:
            try:
                observations.update(read())
            except Exception as exc:  # one broken reader must not blind the others
                self.warnings.warn(f"reader:{name}", "eviction signal %s not observed: %r", name, exc)
        return observations

    def memory_available(self, now: float) -> dict[Signal, Observation]:
        """MemTotal less the root cgroup's working set (cgroup v1: usage less total_inactive_file),
        or, without a v1 memory hierarchy, /proc/meminfo's (MemTotal - MemFree - Inactive(file)),
        as cAdvisor gives the node's memory."""
        meminfo = parse_meminfo(read_text(f"{self.proc}/meminfo") or "")
        total = meminfo.get("MemTotal")
        if total is None:
            self.warnings.warn("meminfo", "eviction signal memory.available not observed: cannot read "
                               "MemTotal from %s/meminfo", self.proc)  # fmt: skip
            return {}
        working_set = None
        if self.mounts.memory is not None:
            root = read_cgroup(self.mounts, "/", now=now, memory_limit=total, processes=False)
            if root is not None and root.memory is not None:
                working_set = root.memory.working_set_bytes
            else:
                self.warnings.warn("root-memory-cgroup", "cannot read the root memory cgroup at %s; "
                                   "memory.available taken from %s/meminfo", self.mounts.memory, self.proc)  # fmt: skip
        if working_set is None:
            memory = meminfo_memory(meminfo, time=now)
            working_set = memory.working_set_bytes if memory is not None else None
        if working_set is None:
            self.warnings.warn("meminfo", "eviction signal memory.available not observed: no MemFree "
                               "in %s/meminfo", self.proc)  # fmt: skip
            return {}
        return {Signal.MEMORY_AVAILABLE: Observation(available_bytes(total, working_set) or 0, total, now)}

    def allocatable_memory_available(self, now: float) -> dict[Signal, Observation]:
        """Allocatable memory less the kubepods cgroup's working set; nothing without a kubepods cgroup."""
        if self.kubepods_cgroup is None or self.allocatable_memory is None:
            return {}
        if self.cgroups is None:
            self.warnings.warn("kubepods", "eviction signal allocatableMemory.available not observed: "
                               "no cgroup manager to read %s", self.kubepods_cgroup)  # fmt: skip
            return {}
        try:
            working_set = self.cgroups.memory_usage(self.kubepods_cgroup).working_set_bytes
        except CgroupError as exc:
            self.warnings.warn("kubepods", "eviction signal allocatableMemory.available not observed: %s", exc)
            return {}
        allocatable = self.allocatable_memory
        return {Signal.ALLOCATABLE_MEMORY_AVAILABLE:
                Observation(max(allocatable - working_set, 0), allocatable, now)}  # fmt: skip

    def filesystems(self, image_fs: str | None, now: float) -> dict[Signal, Observation]:
        """nodefs from the root dir's filesystem; imagefs (and containerfs, which the runtime does
        not report apart) from the image filesystem's, or nodefs's own when they share a device."""
        out: dict[Signal, Observation] = {}
        node = statfs(self.root_dir, now=now)
        if node is None:
            self.warnings.warn("nodefs", "eviction signals nodefs.* not observed: cannot statvfs %s", self.root_dir)
        else:
            out.update(_fs_observations(node, now, Signal.NODEFS_AVAILABLE, Signal.NODEFS_INODES_FREE))
        if image_fs is None:
            return out
        dedicated = self.dedicated_image_fs(image_fs)
        image = statfs(image_fs, now=now) if dedicated else node
        if image is None or dedicated is None:
            self.warnings.warn("imagefs", "eviction signals imagefs.* not observed: cannot statvfs %s", image_fs)
            return out
        out.update(_fs_observations(image, now, Signal.IMAGEFS_AVAILABLE, Signal.IMAGEFS_INODES_FREE))
        out.update(_fs_observations(image, now, Signal.CONTAINERFS_AVAILABLE, Signal.CONTAINERFS_INODES_FREE))
        return out

    def dedicated_image_fs(self, image_fs: str) -> bool | None:
        """Go's HasDedicatedImageFs: the image filesystem is another device than the root dir's;
        None when either cannot be stat'ed."""
        try:
            return os.stat(image_fs).st_dev != os.stat(self.root_dir).st_dev
        except OSError:
            return None

    def pid_available(self, now: float) -> dict[Signal, Observation]:
        """The lower of kernel.pid_max and kernel.threads-max, less the tasks /proc/loadavg counts."""
        limits = [parse_int(read_text(f"{self.proc}/sys/kernel/{name}")) for name in ("pid_max", "threads-max")]
        known = [limit for limit in limits if limit is not None]
        tasks = parse_running_tasks(read_text(f"{self.proc}/loadavg") or "")
        if not known or tasks is None:
            self.warnings.warn("pids", "eviction signal pid.available not observed: cannot read "
                               "%s/sys/kernel/pid_max, threads-max or %s/loadavg", self.proc, self.proc)  # fmt: skip
            return {}
        most = min(known)
        return {Signal.PID_AVAILABLE: Observation(most - tasks, most, now)}

    # -- the pods' usage, for ranking ------------------------------------------------------

    def pods_usage(
        self,
        pods: Sequence[Pod],
        *,
        cgroups: Mapping[str, str | None] | None = None,
        memory: bool = False,
        processes: bool = False,
        storage: Collection[str] = (),
        layers: Mapping[str, Mapping[str, FsUsage]] | None = None,
        budget: float | None = None,
    ) -> dict[str, PodUsage]:
        """Per pod UID: its cgroup's working set (`memory`) and tasks (`processes`), and for the UIDs
        in `storage` its disk use (`layers`: pod UID -> container name -> writable layer, from CRI).
        Disk use walks folders: after `budget` seconds the pods not yet walked are left out."""
        cgroups, layers = cgroups or {}, layers or {}
        deadline = time.monotonic() + budget if budget is not None else None
        out: dict[str, PodUsage] = {}
        for pod in pods:
            uid = pod.metadata.uid
            cgroup = cgroups.get(uid)
            measured = PodUsage(
                memory_working_set=self.pod_memory(cgroup) if memory and cgroup else None,
                processes=self.pod_processes(cgroup) if processes and cgroup else None,
            )
            if uid in storage and (deadline is None or time.monotonic() < deadline):
                measured = PodUsage(measured.memory_working_set, measured.processes,
                                    self.pod_storage(pod, layers.get(uid, {})))  # fmt: skip
            out[uid] = measured
        return out

    def pod_memory(self, cgroup: str) -> int | None:
        """The pod cgroup's working set; None when it is gone (pods come and go: no warning)."""
        if self.cgroups is None:
            return None
        try:
            return self.cgroups.memory_usage(cgroup).working_set_bytes
        except CgroupError:
            return None

    def pod_processes(self, cgroup: str) -> int | None:
        if self.cgroups is None:
            return None
        try:
            return self.cgroups.pids_current(cgroup)
        except CgroupError:
            return None

    def pod_storage(self, pod: Pod, layers: Mapping[str, FsUsage] | None = None) -> PodStorage:
        """The pod's disk use as the stats summary counts it: per container its writable layer
        (`layers`, from CRI ListContainerStats) and its log files; its emptyDir (on disk) and
        configMap volumes; and in the total also its own log files and etc-hosts file."""
        layers = layers or {}
        uid = pod.metadata.uid
        log_dir = pod_log_directory(self.pod_logs_dir, pod)
        pod_dir = os.path.join(self.root_dir, "pods", uid)
        containers: dict[str, ContainerStorage] = {}
        for container in [*pod.spec.containers, *pod.spec.init_containers]:
            logs = _fs_usage(files_usage(os.path.join(log_dir, container.name), now=0.0))
            rootfs = layers.get(container.name)
            if logs is not None or rootfs is not None:
                containers[container.name] = ContainerStorage(rootfs=rootfs, logs=logs)
        volumes: dict[str, FsUsage] = {}
        for volume in pod.spec.volumes:
            folder = _volume_folder(pod_dir, volume)
            used = _fs_usage(disk_usage(folder, now=0.0)) if folder else None
            if used is not None:
                volumes[volume.name] = used
        own = [_fs_usage(files_usage(log_dir, now=0.0)),
               _fs_usage(disk_usage(os.path.join(pod_dir, "etc-hosts"), now=0.0))]
        parts = [*(c.rootfs for c in containers.values()), *(c.logs for c in containers.values()),
                 *volumes.values(), *own]  # fmt: skip
        total = sum(part.bytes for part in parts if part is not None)
        return PodStorage(containers=containers, volumes=volumes, ephemeral_storage=total)


def _fs_observations(fs, now: float, space: Signal, inodes: Signal) -> dict[Signal, Observation]:
    # statfs's inodes_free is f_ffree: glibc's statvfs sets f_favail to the same number on Linux.
    out = {}
    if fs.available_bytes is not None and fs.capacity_bytes is not None:
        out[space] = Observation(fs.available_bytes, fs.capacity_bytes, now)
    if fs.inodes_free is not None and fs.inodes is not None:
        out[inodes] = Observation(fs.inodes_free, fs.inodes, now)
    return out


def _fs_usage(usage: Usage | None) -> FsUsage | None:
    return FsUsage(bytes=usage.used_bytes, inodes=usage.inodes_used) if usage is not None else None


def _volume_folder(pod_dir: str, volume: Volume) -> str | None:
    if volume.empty_dir is not None and volume.empty_dir.medium == "":
        return os.path.join(pod_dir, "volumes", EMPTY_DIR_PLUGIN, volume.name)
    if volume.config_map is not None:
        return os.path.join(pod_dir, "volumes", CONFIG_MAP_PLUGIN, volume.name)
    return None
