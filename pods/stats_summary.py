"""The kubelet's /stats/summary (Go: k8s.io/kubelet/pkg/apis/stats/v1alpha1 Summary), built
from plain readings that actors/server/stats/ gathered from CRI, cgroup files and statfs.

Pure. A reading of None is a value nobody knows, and its field is left out of the JSON, as
the Go kubelet leaves out what it does not know; one missing number never fails the whole
summary. Times are Unix seconds; the JSON carries them as RFC 3339 (metav1.Time).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import msgspec

from pykubelet.pods.status import rfc3339

# Above this a memory limit means "no limit" (Go's isMemoryUnlimited: the kernel rounds
# "unlimited" down from 2^63, so not a single sentinel value).
UNLIMITED_MEMORY = 1 << 62
# Go's criStatsProvider drops a cached CPU sample this old (defaultCachePeriod).
CPU_SAMPLE_MAX_AGE = 600.0
# Two samples closer than this give no new rate: the previous rate is kept, and the older
# sample stays the anchor, so that two clients polling at once do not turn each other's
# windows into a few milliseconds of noise. (Go serves the rate its eviction manager
# computes every 10 s.)
MIN_RATE_WINDOW = 1.0


class Reading(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """Base of the readings: immutable, and out of the garbage collector's sight (they
    hold no cycles), so that a summary's thousands of them do not bring on full
    collections."""


class Cpu(Reading):
    time: float
    usage_core_nano_seconds: int | None = None  # cumulative, since the cgroup was created
    usage_nano_cores: int | None = None  # the rate over the last window


class Memory(Reading):
    time: float
    available_bytes: int | None = None  # limit - working set; None without a limit
    usage_bytes: int | None = None
    working_set_bytes: int | None = None
    rss_bytes: int | None = None
    page_faults: int | None = None
    major_page_faults: int | None = None


class Fs(Reading):
    time: float
    available_bytes: int | None = None
    capacity_bytes: int | None = None
    used_bytes: int | None = None
    inodes_free: int | None = None
    inodes: int | None = None
    inodes_used: int | None = None


class Usage(Reading):
    """Space used by some files (du), without the filesystem's capacity."""

    time: float
    used_bytes: int
    inodes_used: int


class Interface(Reading):
    name: str
    rx_bytes: int | None = None
    rx_errors: int | None = None
    tx_bytes: int | None = None
    tx_errors: int | None = None


class Network(Reading):
    time: float
    interfaces: tuple[Interface, ...] = ()


class ContainerStats(Reading):
    name: str
    start_time: float  # the container's creation time, as Go reports it
    cpu: Cpu | None = None
    memory: Memory | None = None
    rootfs: Fs | None = None  # the writable layer: used from the runtime, sizes of its fs
    logs: Fs | None = None  # the container's log files: used by them, sizes of the root fs


class VolumeStats(Reading):
    name: str
    fs: Fs


class PodStats(Reading):
    name: str
    namespace: str
    uid: str
    start_time: float  # the sandbox's creation time
    containers: tuple[ContainerStats, ...] = ()
    # Pod-level readings (the runtime's sandbox stats or the pod's cgroup); None: the sum
    # of the containers', as Go's criStatsProvider does without a pod cgroup.
    cpu: Cpu | None = None
    memory: Memory | None = None
    network: Network | None = None
    volumes: tuple[VolumeStats, ...] = ()
    process_count: int | None = None
    # For ephemeral-storage: the filesystem of the root dir, the pod's own log files (not
    # its containers') and its etc-hosts file. No root fs: no ephemeral-storage.
    root_fs: Fs | None = None
    pod_logs: Usage | None = None
    etc_hosts: Usage | None = None


class Rlimit(Reading):
    time: float
    max_pid: int | None = None
    cur_proc: int | None = None


class NodeStats(Reading):
    name: str
    start_time: float  # boot time
    cpu: Cpu | None = None
    memory: Memory | None = None
    network: Network | None = None
    fs: Fs | None = None  # the root dir's filesystem
    image_fs: Fs | None = None
    container_fs: Fs | None = None
    rlimit: Rlimit | None = None


# -- readings into numbers -----------------------------------------------------------------


def working_set(usage: int, inactive_file: int | None) -> int:
    """cAdvisor's working set: usage less the inactive page cache, never below 0."""
    if inactive_file is None:
        return usage
    return max(usage - inactive_file, 0)


def available_bytes(limit: int | None, working_set_bytes: int | None) -> int | None:
    """limit - working set (Go's AvailableBytes); None without a limit or a working set."""
    if limit is None or working_set_bytes is None or limit > UNLIMITED_MEMORY:
        return None
    return max(limit - working_set_bytes, 0)


class CpuUsageCache:
    """The last cumulative CPU reading per key (a container, pod or the node) and the rate
    computed from it, as Go's criStatsProvider caches them (cpuUsageCache): the rate of a
    key needs two readings. Owned by one StatsProvider."""

    def __init__(self, min_window: float = MIN_RATE_WINDOW, max_age: float = CPU_SAMPLE_MAX_AGE) -> None:
        self.min_window = min_window
        self.max_age = max_age
        self._last: dict[Any, tuple[int, float, int | None]] = {}  # key -> usage ns, time, rate

    def __len__(self) -> int:
        return len(self._last)

    def rate(self, key: Any, usage_core_nano_seconds: int, at: float) -> int | None:
        """Nanocores over the window from the kept reading to this one. The first reading
        of a key, and one after the counter went back (a new cgroup under the same key),
        give None; a reading within min_window of the kept one gives the kept rate."""
        last = self._last.get(key)
        if last is None or usage_core_nano_seconds < last[0]:
            self._last[key] = (usage_core_nano_seconds, at, None)
            return None
        usage, when, rate = last
        window = at - when
        if window < self.min_window:
            return rate
        rate = int((usage_core_nano_seconds - usage) / window)
        self._last[key] = (usage_core_nano_seconds, at, rate)
        return rate

    def with_rate(self, key: Any, cpu: Cpu | None) -> Cpu | None:
        """`cpu` with usage_nano_cores from this cache (the runtime's own rate is not used:
        containerd 1.6 reports 0 for a first reading and keeps one cache for all its
        callers, containerd#9531)."""
        if cpu is None or cpu.usage_core_nano_seconds is None:
            return cpu
        return msgspec.structs.replace(
            cpu, usage_nano_cores=self.rate(key, cpu.usage_core_nano_seconds, cpu.time)
        )

    def forget_older_than(self, now: float) -> None:
        """Drop readings older than max_age (keys that were not seen for that long)."""
        stale = [key for key, (_, when, _) in self._last.items() if now - when > self.max_age]
        for key in stale:
            del self._last[key]


def pod_cpu(containers: Iterable[ContainerStats]) -> Cpu | None:
    """The pod's CPU as the sum of its containers' (each sum over the containers that have
    the value; a value none has is left out)."""
    cpus = [c.cpu for c in containers if c.cpu is not None]
    if not cpus:
        return None
    return Cpu(
        time=max(c.time for c in cpus),
        usage_core_nano_seconds=_sum(c.usage_core_nano_seconds for c in cpus),
        usage_nano_cores=_sum(c.usage_nano_cores for c in cpus),
    )


def pod_memory(containers: Iterable[ContainerStats]) -> Memory | None:
    """The pod's memory as the sum of its containers'."""
    memories = [c.memory for c in containers if c.memory is not None]
    if not memories:
        return None
    return Memory(
        time=max(m.time for m in memories),
        available_bytes=_sum(m.available_bytes for m in memories),
        usage_bytes=_sum(m.usage_bytes for m in memories),
        working_set_bytes=_sum(m.working_set_bytes for m in memories),
        rss_bytes=_sum(m.rss_bytes for m in memories),
        page_faults=_sum(m.page_faults for m in memories),
        major_page_faults=_sum(m.major_page_faults for m in memories),
    )


def ephemeral_storage(pod: PodStats) -> Fs | None:
    """Go's calcEphemeralStorage (CRI stats provider): the root fs's sizes; used = the
    containers' writable layers and logs, the ephemeral volumes, the pod's own logs and its
    etc-hosts file."""
    root = pod.root_fs
    if root is None:
        return None
    time, used, inodes = root.time, None, None
    for container in pod.containers:
        if container.rootfs is None:
            continue  # Go adds a container's logs only together with its rootfs
        parts: list[Fs | Usage] = [container.rootfs]
        if container.logs is not None:
            parts.append(container.logs)
        for part in parts:
            time = max(time, part.time)
            used = _add(used, part.used_bytes)
            inodes = _add(inodes, part.inodes_used)
    for extra in [*(v.fs for v in pod.volumes), pod.pod_logs, pod.etc_hosts]:
        if extra is not None:
            time = max(time, extra.time)
            used = _add(used, extra.used_bytes)
            inodes = _add(inodes, extra.inodes_used)
    return Fs(
        time=time, available_bytes=root.available_bytes, capacity_bytes=root.capacity_bytes,
        used_bytes=used, inodes_free=root.inodes_free, inodes=root.inodes, inodes_used=inodes,
    )


def with_usage(fs: Fs | None, usage: Usage | None) -> Fs | None:
    """A filesystem's sizes with the usage of some files on it (Go's metricsByPathToFsStats:
    a container's logs on the root fs)."""
    if fs is None and usage is None:
        return None
    if usage is None:
        return fs
    if fs is None:
        return Fs(time=usage.time, used_bytes=usage.used_bytes, inodes_used=usage.inodes_used)
    return msgspec.structs.replace(
        fs, time=max(fs.time, usage.time), used_bytes=usage.used_bytes, inodes_used=usage.inodes_used
    )


def _sum(values: Iterable[int | None]) -> int | None:
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def _add(total: int | None, value: int | None) -> int | None:
    if value is None:
        return total
    return value if total is None else total + value


# -- which pods and containers are shown ---------------------------------------------------


class ListedSandbox(Reading):
    id: str
    name: str
    namespace: str
    uid: str
    created_at: float
    ready: bool


class ListedContainer(Reading):
    id: str
    sandbox_id: str
    name: str
    created_at: float
    running: bool


def shown(
    sandboxes: Sequence[ListedSandbox], containers: Sequence[ListedContainer]
) -> list[tuple[ListedSandbox, list[ListedContainer]]]:
    """The pods the summary lists, each with its running containers, sorted by namespace,
    name, then containers by name (Go's order is a map's: none).

    Go's removeTerminatedPods: of the sandboxes of one pod name and namespace, the ready
    ones, or else the newest; removeTerminatedContainers: the running containers only; and
    a pod is listed from its containers' stats, so one without a running container is not.
    """
    by_name: dict[tuple[str, str], list[ListedSandbox]] = {}
    for sandbox in sorted(sandboxes, key=lambda s: s.created_at):
        by_name.setdefault((sandbox.namespace, sandbox.name), []).append(sandbox)
    kept: dict[str, ListedSandbox] = {}
    for group in by_name.values():
        ready = [s for s in group if s.ready]
        for sandbox in ready or group[-1:]:
            kept[sandbox.id] = sandbox
    running: dict[str, list[ListedContainer]] = {}
    for container in containers:
        if container.running and container.sandbox_id in kept:
            running.setdefault(container.sandbox_id, []).append(container)
    pods = [(kept[sid], sorted(cs, key=lambda c: (c.name, c.created_at))) for sid, cs in running.items()]
    return sorted(pods, key=lambda p: (p[0].namespace, p[0].name, p[0].created_at))


# -- the JSON -------------------------------------------------------------------------------
# Output structs named and ordered as Go's stats/v1alpha1 types; a None field is left out
# (omitempty). Encoded with msgspec.json.encode.


class _Out(msgspec.Struct, rename="camel", omit_defaults=True, gc=False):
    pass


class CpuJSON(_Out):
    time: str
    usage_nano_cores: int | None = None
    usage_core_nano_seconds: int | None = None


class MemoryJSON(_Out):
    time: str
    available_bytes: int | None = None
    usage_bytes: int | None = None
    working_set_bytes: int | None = None
    rss_bytes: int | None = None
    page_faults: int | None = None
    major_page_faults: int | None = None


class FsJSON(_Out):
    time: str
    available_bytes: int | None = None
    capacity_bytes: int | None = None
    used_bytes: int | None = None
    inodes_free: int | None = None
    inodes: int | None = None
    inodes_used: int | None = None


class VolumeJSON(FsJSON):  # Go: FsStats inline, then the name
    name: str = ""


class InterfaceJSON(_Out):
    name: str
    rx_bytes: int | None = None
    rx_errors: int | None = None
    tx_bytes: int | None = None
    tx_errors: int | None = None


class NetworkJSON(_Out):  # Go: the default interface inline (its name "" if none), then all
    time: str
    name: str
    rx_bytes: int | None = None
    rx_errors: int | None = None
    tx_bytes: int | None = None
    tx_errors: int | None = None
    interfaces: list[InterfaceJSON] = []


class RuntimeJSON(_Out):
    image_fs: FsJSON | None = None
    container_fs: FsJSON | None = None


class RlimitJSON(msgspec.Struct, omit_defaults=True, gc=False):
    time: str
    maxpid: int | None = None
    curproc: int | None = None


class NodeJSON(_Out):
    node_name: str
    start_time: str
    cpu: CpuJSON | None = None
    memory: MemoryJSON | None = None
    network: NetworkJSON | None = None
    fs: FsJSON | None = None
    runtime: RuntimeJSON | None = None
    rlimit: RlimitJSON | None = None


class PodRefJSON(msgspec.Struct, gc=False):
    name: str
    namespace: str
    uid: str


class ContainerJSON(_Out):
    name: str
    start_time: str
    cpu: CpuJSON | None = None
    memory: MemoryJSON | None = None
    rootfs: FsJSON | None = None
    logs: FsJSON | None = None


class ProcessJSON(msgspec.Struct, gc=False):
    process_count: int


class PodJSON(_Out):
    pod_ref: PodRefJSON
    start_time: str
    containers: list[ContainerJSON]
    cpu: CpuJSON | None = None
    memory: MemoryJSON | None = None
    network: NetworkJSON | None = None
    volume: list[VolumeJSON] = []
    ephemeral_storage: FsJSON | None = msgspec.field(default=None, name="ephemeral-storage")
    process_stats: ProcessJSON | None = msgspec.field(default=None, name="process_stats")


class SummaryJSON(_Out):
    node: NodeJSON
    pods: list[PodJSON]


def summary(node: NodeStats, pods: Sequence[PodStats], *, only_cpu_and_memory: bool = False) -> SummaryJSON:
    """The Summary as the Go kubelet serializes it (msgspec.json.encode it). With
    only_cpu_and_memory (Go's GetCPUAndMemoryStats): the node's name, start time, cpu and
    memory; each pod's reference, start time, cpu, memory and its containers' name, start
    time, cpu and memory."""
    times = _Times()
    return SummaryJSON(
        node=_node(node, times, only_cpu_and_memory),
        pods=[_pod(pod, times, only_cpu_and_memory) for pod in pods],
    )


class _Times:
    """rfc3339 with a cache: a summary repeats the same few seconds hundreds of times."""

    def __init__(self) -> None:
        self._seen: dict[int, str] = {}

    def __call__(self, seconds: float) -> str:
        whole = int(seconds)
        text = self._seen.get(whole)
        if text is None:
            text = self._seen[whole] = rfc3339(whole)
        return text


def _node(node: NodeStats, times: _Times, only_cpu_and_memory: bool) -> NodeJSON:
    out = NodeJSON(node_name=node.name, start_time=times(node.start_time),
                   cpu=_cpu(node.cpu, times), memory=_memory(node.memory, times))
    if only_cpu_and_memory:
        return out
    out.network = _network(node.network, times)
    out.fs = _fs(node.fs, times)
    if node.image_fs is not None or node.container_fs is not None:
        out.runtime = RuntimeJSON(image_fs=_fs(node.image_fs, times), container_fs=_fs(node.container_fs, times))
    if node.rlimit is not None:
        out.rlimit = RlimitJSON(time=times(node.rlimit.time), maxpid=node.rlimit.max_pid,
                                curproc=node.rlimit.cur_proc)
    return out


def _pod(pod: PodStats, times: _Times, only_cpu_and_memory: bool) -> PodJSON:
    out = PodJSON(
        pod_ref=PodRefJSON(name=pod.name, namespace=pod.namespace, uid=pod.uid),
        start_time=times(pod.start_time),
        containers=[_container(c, times, only_cpu_and_memory) for c in pod.containers],
        cpu=_cpu(pod.cpu if pod.cpu is not None else pod_cpu(pod.containers), times),
        memory=_memory(pod.memory if pod.memory is not None else pod_memory(pod.containers), times),
    )
    if only_cpu_and_memory:
        return out
    out.network = _network(pod.network, times)
    out.volume = [_volume(v, times) for v in pod.volumes]
    out.ephemeral_storage = _fs(ephemeral_storage(pod), times)
    if pod.process_count is not None:
        out.process_stats = ProcessJSON(process_count=pod.process_count)
    return out


def _container(container: ContainerStats, times: _Times, only_cpu_and_memory: bool) -> ContainerJSON:
    out = ContainerJSON(name=container.name, start_time=times(container.start_time),
                        cpu=_cpu(container.cpu, times), memory=_memory(container.memory, times))
    if not only_cpu_and_memory:
        out.rootfs = _fs(container.rootfs, times)
        out.logs = _fs(container.logs, times)
    return out


def _cpu(cpu: Cpu | None, times: _Times) -> CpuJSON | None:
    if cpu is None:
        return None
    return CpuJSON(time=times(cpu.time), usage_nano_cores=cpu.usage_nano_cores,
                   usage_core_nano_seconds=cpu.usage_core_nano_seconds)


def _memory(m: Memory | None, times: _Times) -> MemoryJSON | None:
    if m is None:
        return None
    return MemoryJSON(time=times(m.time), available_bytes=m.available_bytes, usage_bytes=m.usage_bytes,
                      working_set_bytes=m.working_set_bytes, rss_bytes=m.rss_bytes, page_faults=m.page_faults,
                      major_page_faults=m.major_page_faults)


def _fs(fs: Fs | None, times: _Times) -> FsJSON | None:
    if fs is None:
        return None
    return FsJSON(time=times(fs.time), available_bytes=fs.available_bytes, capacity_bytes=fs.capacity_bytes,
                  used_bytes=fs.used_bytes, inodes_free=fs.inodes_free, inodes=fs.inodes, inodes_used=fs.inodes_used)


def _volume(volume: VolumeStats, times: _Times) -> VolumeJSON:
    fs = volume.fs
    return VolumeJSON(time=times(fs.time), available_bytes=fs.available_bytes, capacity_bytes=fs.capacity_bytes,
                      used_bytes=fs.used_bytes, inodes_free=fs.inodes_free, inodes=fs.inodes,
                      inodes_used=fs.inodes_used, name=volume.name)


DEFAULT_INTERFACE = "eth0"  # Go's defaultNetworkInterfaceName


def _network(network: Network | None, times: _Times) -> NetworkJSON | None:
    """Go's NetworkStats: every interface listed, the default one (eth0) also inline; Go's
    inline name is not omitempty, so it is "" when there is no eth0."""
    if network is None:
        return None
    interfaces = [_interface(i) for i in network.interfaces]
    default = next((i for i in interfaces if i.name == DEFAULT_INTERFACE), InterfaceJSON(name=""))
    return NetworkJSON(time=times(network.time), name=default.name, rx_bytes=default.rx_bytes,
                       rx_errors=default.rx_errors, tx_bytes=default.tx_bytes, tx_errors=default.tx_errors,
                       interfaces=interfaces)


def _interface(i: Interface) -> InterfaceJSON:
    return InterfaceJSON(name=i.name, rx_bytes=i.rx_bytes, rx_errors=i.rx_errors, tx_bytes=i.tx_bytes,
                         tx_errors=i.tx_errors)
