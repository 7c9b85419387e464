"""GET /stats/summary (and ?only_cpu_and_memory=true): the node's and each pod's cpu,
memory, filesystems and network, as the Go kubelet serves them to metrics-server and to
`kubectl get --raw /api/v1/nodes/<node>/proxy/stats/summary`.

Which pods and containers: the runtime's sandboxes and running containers (CRI lists).
The numbers: the runtime's stats first (ListPodSandboxStats where it answers, else
ListContainerStats; ImageFsInfo), then cgroup files, /proc and statfs for what the runtime
does not give (ports/node_stats.py, one batch in a worker thread). The JSON:
pods/stats_summary.py. A number that cannot be read is left out, never an error; only a
runtime that cannot be listed fails the request (500).

The runtime's stats are a sample kept up to `cri_stats_max_age` (10 s, Go's housekeeping
period: its /stats/summary serves cached stats too), not a call per request: containerd 1.6
asks each container's shim in turn, ~0.7 ms a container (160-290 ms for 220 containers).
`run()` keeps the sample fresh in the background; without it, a request refreshes a stale
sample itself. A container the sample lacks (started since, or a runtime without stats) is
read from its cgroup, found by folder name as cAdvisor finds it.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import msgspec
import trio
from cri_api.v1 import api_pb2

from pykubelet.actors.runtime_link import RuntimeHandle
from pykubelet.actors.volumes.manager import PLUGINS
from pykubelet.messages.pod import PodList
from pykubelet.pods import stats_summary as summary
from pykubelet.pods.resource_metrics import resource_metrics
from pykubelet.pods.labels import CONTAINER_NAME_LABEL, MANAGED_LABEL
from pykubelet.pods.stats_summary import (
    ContainerStats, Cpu, CpuUsageCache, Fs, Interface, ListedContainer, ListedSandbox, Memory, Network,
    NodeStats, PodStats, Rlimit, Usage, VolumeStats,
)
from pykubelet.ports import node_stats
from pykubelet.ports.cri import CriCallError, CriClient, CriError
from pykubelet.ports.node_stats import CgroupMounts, ReadPlan, Readings
from pykubelet.supervisor.verbosity import V

from .http import Request, Response

log = logging.getLogger("pykubelet.server.stats")

DEFAULT_POD_LOGS_DIR = "/var/log/pods"
CRI_STATS_MAX_AGE = 10.0
VOLUME_STATS_MAX_AGE = 60.0  # Go's volumeStatsAggPeriod: du of a volume at most once a minute
CGROUP_RESCAN_INTERVAL = 2.0  # cgroups not found yet are looked for at most this often
UNSUPPORTED_RETRY = 600.0  # a stats call the runtime refused is tried again after this
# run() samples while summaries are asked for (and at first): nobody asking, no load on
# the runtime (containerd 1.6 spends ~0.7 ms of shim calls per container on a sample).
SAMPLE_WHILE_ASKED = 300.0
_MANAGED = {MANAGED_LABEL: "true"}


class ContainerSample(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    cpu: Cpu | None = None  # cumulative; the rate is the provider's
    memory: Memory | None = None
    writable_layer: Fs | None = None  # used bytes and inodes, without the filesystem's sizes
    mountpoint: str = ""  # of the writable layer's filesystem


class SandboxSample(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    cpu: Cpu | None = None
    memory: Memory | None = None
    network: Network | None = None
    process_count: int | None = None


class CriSample(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """The runtime's stats of the managed containers (and sandboxes, from
    ListPodSandboxStats), taken at `taken_at` on the provider's clock."""

    taken_at: float
    containers: dict[str, ContainerSample] = {}
    sandboxes: dict[str, SandboxSample] = {}


class StatsState:
    """What one StatsProvider keeps between requests: the CPU readings the rates need, the
    runtime's last sample, where cgroups are, recent volume sizes."""

    def __init__(self) -> None:
        self.cpu = CpuUsageCache()
        self.sample: CriSample | None = None
        self.sandbox_stats_retry_at = 0.0  # ListPodSandboxStats refused: not before this
        self.container_stats_retry_at = 0.0
        self.cgroups: dict[str, str] = {}  # container or sandbox id -> cgroup path
        self.pod_cgroups: dict[str, str] = {}  # pod uid -> cgroup path
        self.scanned_at = -math.inf
        self.not_found: set[str] = set()  # ids and uids a scan looked for in vain: not again
        self.volumes: dict[str, Usage] = {}  # volume folder -> its du
        self.mounts: CgroupMounts | None = None
        self.refreshing = trio.Lock()


class StatsProvider:
    def __init__(
        self,
        *,
        runtime: RuntimeHandle,
        pods: Callable[[], PodList],
        relist: Callable[[], Any],
        root_dir: str,
        node_name: str,
        clock: Callable[[], float] = time.time,
        pod_logs_dir: str = DEFAULT_POD_LOGS_DIR,
        state: StatsState | None = None,
        cri_stats_max_age: float = CRI_STATS_MAX_AGE,
    ) -> None:
        """`pods`: the kubelet's pods, for their volumes. `relist`: the PLEG's last view,
        not used: the summary needs the creation times it lacks, so the runtime is listed,
        as Go's getPodAndContainerMaps lists it (two calls, ~3 ms for 110 pods).
        `clock`: Unix time, as the runtime's timestamps."""
        self.runtime = runtime
        self.pods = pods
        self.relist = relist
        self.root_dir = root_dir
        self.node_name = node_name
        self.clock = clock
        self.pod_logs_dir = pod_logs_dir
        self.state = state if state is not None else StatsState()
        self.cri_stats_max_age = cri_stats_max_age
        self._sampling = False
        self._asked_at = clock()

    async def summary(self, request: Request) -> Response:
        if request.method not in ("GET", "POST"):  # Go routes both
            return Response.text(405, f"method {request.method} not allowed on {request.path}\n")
        only = request.query.get("only_cpu_and_memory") == ["true"]  # Go: exactly one, "true"
        try:
            body = await self.collect(only_cpu_and_memory=only)
        except CriError as exc:
            log.warning("stats summary failed: %s", exc)
            return Response.text(500, f"Internal Error: failed to list pod stats: {exc}\n")
        return Response.json(200, msgspec.json.encode(body))

    async def resource_metrics(self, request: Request) -> Response:
        """/metrics/resource: the cpu-and-memory Summary as the Go kubelet's resource metrics;
        a runtime that cannot be listed gives resource_scrape_error 1, not an error answer."""
        try:
            body = await self.collect(only_cpu_and_memory=True)
        except CriError as exc:
            log.warning("resource metrics failed: %s", exc)
            body = None
        return Response(200, resource_metrics(body), "text/plain; version=0.0.4; charset=utf-8")

    async def collect(self, *, only_cpu_and_memory: bool = False) -> summary.SummaryJSON:
        """The Summary (msgspec.json.encode it); CriError when the runtime cannot be listed."""
        cri = self.runtime.client
        self._asked_at = self.clock()
        got: dict[str, Any] = {}

        async def sandboxes() -> None:
            got["sandboxes"] = await cri.list_pod_sandbox(api_pb2.PodSandboxFilter(label_selector=_MANAGED))

        async def containers() -> None:
            got["containers"] = await cri.list_containers(api_pb2.ContainerFilter(label_selector=_MANAGED))

        async def sample() -> None:
            got["sample"] = await self._sample(cri)

        async def image_fs() -> None:
            try:
                got["image_fs"] = await cri.image_fs_info()
            except CriCallError as exc:
                log.log(V(4), "ImageFsInfo failed: %s", exc)

        await _all(sandboxes, containers, sample, *(() if only_cpu_and_memory else (image_fs,)))
        pods = summary.shown([_listed_sandbox(s) for s in got["sandboxes"]],
                             [_listed_container(c) for c in got["containers"]])
        if self.state.mounts is None:
            self.state.mounts = await trio.to_thread.run_sync(node_stats.read_cgroup_mounts)
        plan = self._plan(pods, got["sample"], got.get("image_fs"), full=not only_cpu_and_memory)
        readings = await trio.to_thread.run_sync(node_stats.read_all, plan)
        self._remember(plan, readings)
        parts = _Parts(plan, readings, got["sample"], got.get("image_fs"), self.state.cpu)
        built = [parts.pod(sandbox, listed) for sandbox, listed in pods]
        node = parts.node(self.node_name)
        self.state.cpu.forget_older_than(plan.now)
        return summary.summary(node, built, only_cpu_and_memory=only_cpu_and_memory)

    # -- the runtime's sample --------------------------------------------------------------

    async def run(self) -> None:
        """Keep the runtime's sample fresh while summaries are asked for, so that no request
        waits for it (Go's housekeeping). Optional: run it in the server's nursery."""
        self._sampling = True
        try:
            while True:
                await self.runtime.wait_connected()
                if self.clock() - self._asked_at > SAMPLE_WHILE_ASKED:
                    self._sampling = False  # a request refreshes the sample itself
                    await trio.sleep(self.cri_stats_max_age)
                    continue
                self._sampling = True
                try:
                    async with self.state.refreshing:
                        await self._refresh(self.runtime.client)
                except CriError as exc:
                    log.log(V(4), "stats sample failed: %s", exc)
                await trio.sleep(self.cri_stats_max_age)
        finally:
            self._sampling = False

    async def _sample(self, cri: CriClient) -> CriSample:
        state = self.state
        # While run() is on it, a sample a little past its age will do.
        limit = self.cri_stats_max_age * (2 if self._sampling else 1)

        def stale() -> bool:
            return state.sample is None or self.clock() - state.sample.taken_at > limit

        if stale():
            async with state.refreshing:  # one refresh for the requests that wait on it
                if stale():
                    await self._refresh(cri)
        assert state.sample is not None
        return state.sample

    async def _refresh(self, cri: CriClient) -> None:
        """ListPodSandboxStats where the runtime answers it, else ListContainerStats.
        ListPodSandboxStats refused (UNIMPLEMENTED, or containerd 1.6's UNKNOWN "cgroupPath
        is empty" for a sandbox without a cgroup parent, as pykubelet runs them) is not
        asked again for UNSUPPORTED_RETRY; nor is an UNIMPLEMENTED ListContainerStats."""
        state, now = self.state, self.clock()
        if now >= state.sandbox_stats_retry_at:
            try:
                stats = await cri.list_pod_sandbox_stats(api_pb2.PodSandboxStatsFilter(label_selector=_MANAGED))
            except CriCallError as exc:
                log.info("ListPodSandboxStats refused, using ListContainerStats: %s", exc)
                state.sandbox_stats_retry_at = now + UNSUPPORTED_RETRY
            else:
                state.sample = _sandboxes_sample(stats, taken_at=now)
                return
        containers: dict[str, ContainerSample] = {}
        if now >= state.container_stats_retry_at:
            try:
                stats = await cri.list_container_stats(api_pb2.ContainerStatsFilter(label_selector=_MANAGED))
            except CriCallError as exc:
                # Cgroups stand in; a runtime without the call is not asked again for a while.
                if exc.code == "UNIMPLEMENTED":
                    log.info("ListContainerStats is not implemented, reading cgroups alone: %s", exc)
                    state.container_stats_retry_at = now + UNSUPPORTED_RETRY
                else:
                    log.log(V(4), "ListContainerStats failed, reading cgroups: %s", exc)
            else:
                containers = {s.attributes.id: _container_sample(s, taken_at=now) for s in stats}
        state.sample = CriSample(taken_at=now, containers=containers)

    # -- what to read from files -----------------------------------------------------------

    def _plan(self, pods: Sequence[tuple[ListedSandbox, list[ListedContainer]]], sample: CriSample,
              image_fs: api_pb2.ImageFsInfoResponse | None, *, full: bool) -> ReadPlan:
        state, now = self.state, self.clock()
        containers = {c.id for _, listed in pods for c in listed}
        sandboxes = {s.id for s, _ in pods}

        def measured(cid: str) -> bool:
            found = sample.containers.get(cid)
            return found is not None and found.cpu is not None and found.memory is not None

        measure = {cid for cid in containers if not measured(cid)}
        measure_uids = {s.uid for s, _ in pods if s.id not in sample.sandboxes}
        # The cgroups wanted: to measure; in full, every container's (processes) and
        # sandbox's (network namespace).
        wanted = measure | (containers | sandboxes if full else set())
        unknown = bool(wanted - state.cgroups.keys() - state.not_found) or bool(
            measure_uids - state.pod_cgroups.keys() - state.not_found)
        plan = ReadPlan(
            now=now, mounts=state.mounts or CgroupMounts(), full=full, container_ids=containers,
            measure_ids=measure, sandbox_ids=sandboxes, measure_uids=measure_uids,
            cgroups={i: p for i, p in state.cgroups.items() if i in containers or i in sandboxes},
            pod_cgroups={u: p for u, p in state.pod_cgroups.items() if u in measure_uids},
            scan=unknown and now - state.scanned_at >= CGROUP_RESCAN_INTERVAL,
            root_dir=self.root_dir,
        )
        if not full:
            return plan
        if image_fs is not None:
            plan.image_mounts = [fs.fs_id.mountpoint for fs in image_fs.image_filesystems[:1] if fs.fs_id.mountpoint]
        plan.image_mounts += sorted({s.mountpoint for s in sample.containers.values() if s.mountpoint})
        specs = {p.metadata.uid: p for p in self.pods().items}
        for sandbox, listed in pods:
            pod_dir = f"{self.pod_logs_dir}/{sandbox.namespace}_{sandbox.name}_{sandbox.uid}"
            pod_root = f"{self.root_dir}/pods/{sandbox.uid}"
            plan.pod_log_dirs[sandbox.uid] = pod_dir
            plan.etc_hosts[sandbox.uid] = f"{pod_root}/etc-hosts"
            for container in listed:
                plan.log_dirs[container.id] = f"{pod_dir}/{container.name}"
            spec = specs.get(sandbox.uid)
            for name, plugin in _measured_volumes(spec.spec.volumes if spec is not None else ()):
                folder = f"{pod_root}/volumes/{plugin}/{name}"
                plan.volumes.setdefault(sandbox.uid, []).append(folder)
                cached = state.volumes.get(folder)
                if cached is not None and now - cached.time < VOLUME_STATS_MAX_AGE:
                    plan.volume_usage[folder] = cached
        return plan

    def _remember(self, plan: ReadPlan, readings: Readings) -> None:
        state = self.state
        # Of what is still shown: what was known or found, and is not gone.
        state.cgroups, state.pod_cgroups = readings.cgroup_paths, readings.pod_cgroup_paths
        shown = plan.container_ids | plan.sandbox_ids | plan.measure_uids
        state.not_found &= shown
        if plan.scan:
            state.scanned_at = plan.now
            # Containers without a cgroup of their own (the embedded runtime's), pods without
            # a pod cgroup (no cgroup parent): a new scan would not find them either.
            looked_for = plan.measure_ids | plan.measure_uids | (
                plan.container_ids | plan.sandbox_ids if plan.full else set())
            state.not_found |= looked_for - state.cgroups.keys() - state.pod_cgroups.keys()
        if plan.full:
            state.volumes = dict(readings.volume_usage)


class _Parts:
    """Builds the summary's node and pods from one request's listing, sample and reads."""

    def __init__(self, plan: ReadPlan, readings: Readings, sample: CriSample,
                 image_fs: api_pb2.ImageFsInfoResponse | None, cpu: CpuUsageCache) -> None:
        self.plan, self.readings, self.sample, self.image_fs_info, self.cpu = plan, readings, sample, image_fs, cpu
        self.root_fs = readings.statfs.get(plan.root_dir)

    def node(self, name: str) -> NodeStats:
        plan, readings = self.plan, self.readings
        root = readings.node_cgroup
        cpu = None
        if root is not None and root.cpu_usage_ns is not None:
            cpu = self.cpu.with_rate("node", Cpu(time=root.time, usage_core_nano_seconds=root.cpu_usage_ns))
        memory = root.memory if root is not None and root.memory is not None else readings.node_memory
        image_fs = self._image_fs()
        return NodeStats(
            name=name, start_time=readings.boot_time if readings.boot_time is not None else plan.now,
            cpu=cpu, memory=memory,
            network=_network(plan.now, readings.node_network),
            fs=self.root_fs,
            image_fs=image_fs, container_fs=image_fs,  # Go's CRI stats: the same filesystem
            rlimit=Rlimit(time=plan.now, max_pid=readings.max_pid, cur_proc=readings.cur_proc) if plan.full else None,
        )

    def _image_fs(self) -> Fs | None:
        """Go's ImageFsStats: used from the runtime, sizes of its filesystem (the first)."""
        if self.image_fs_info is None or not self.image_fs_info.image_filesystems:
            return None
        fs = self.image_fs_info.image_filesystems[0]
        used = Fs(time=fs.timestamp / 1e9 if fs.timestamp else self.plan.now,
                  used_bytes=_value(fs, "used_bytes"), inodes_used=_value(fs, "inodes_used"))
        return _on(self.readings.statfs.get(fs.fs_id.mountpoint), used)

    def pod(self, sandbox: ListedSandbox, listed: list[ListedContainer]) -> PodStats:
        plan, readings = self.plan, self.readings
        containers = tuple(self._container(c) for c in listed)
        counts = [readings.process_counts[c.id] for c in listed if c.id in readings.process_counts]
        pod_cpu = pod_memory = network = process_count = None
        from_runtime = self.sample.sandboxes.get(sandbox.id)
        pod_cgroup = readings.pods.get(sandbox.uid)
        if from_runtime is not None:
            pod_cpu, pod_memory, network = from_runtime.cpu, from_runtime.memory, from_runtime.network
            process_count = from_runtime.process_count
        elif pod_cgroup is not None:
            if pod_cgroup.cpu_usage_ns is not None:
                pod_cpu = Cpu(time=pod_cgroup.time, usage_core_nano_seconds=pod_cgroup.cpu_usage_ns)
            pod_memory = pod_cgroup.memory
        if counts:  # Go sums its containers' process counts
            process_count = sum(counts)
        if network is None:
            network = _network(plan.now, readings.networks.get(sandbox.id))
        volumes = tuple(
            VolumeStats(name=folder.rsplit("/", 1)[1],
                        fs=summary.with_usage(readings.statfs[folder], readings.volume_usage[folder]))
            for folder in plan.volumes.get(sandbox.uid, ()) if folder in readings.volume_usage
        )
        full = plan.full
        return PodStats(
            name=sandbox.name, namespace=sandbox.namespace, uid=sandbox.uid, start_time=sandbox.created_at,
            containers=containers, cpu=self.cpu.with_rate(("pod", sandbox.uid), pod_cpu), memory=pod_memory,
            network=network if full else None, volumes=volumes, process_count=process_count if full else None,
            root_fs=self.root_fs if full else None,
            pod_logs=_some_files(readings.pod_logs.get(sandbox.uid)), etc_hosts=readings.etc_hosts.get(sandbox.uid),
        )

    def _container(self, c: ListedContainer) -> ContainerStats:
        readings = self.readings
        from_runtime = self.sample.containers.get(c.id)
        cgroup = readings.containers.get(c.id)
        cpu = memory = rootfs = logs = None
        if cgroup is not None:
            if cgroup.cpu_usage_ns is not None:
                cpu = Cpu(time=cgroup.time, usage_core_nano_seconds=cgroup.cpu_usage_ns)
            memory = cgroup.memory
        if from_runtime is not None:
            cpu = cpu if cpu is not None else from_runtime.cpu
            memory = memory if memory is not None else from_runtime.memory
            if from_runtime.writable_layer is not None:
                rootfs = _on(readings.statfs.get(from_runtime.mountpoint), from_runtime.writable_layer)
        usage = readings.logs.get(c.id)
        if usage is not None:
            # Go: a log folder without files gives the root fs's sizes and no usage.
            logs = summary.with_usage(self.root_fs, _some_files(usage))
        return ContainerStats(
            name=c.name, start_time=c.created_at, cpu=self.cpu.with_rate(("container", c.id), cpu),
            memory=memory, rootfs=rootfs, logs=logs,
        )


def _on(sizes: Fs | None, used: Fs) -> Fs:
    """`used` (bytes and inodes used, and its time) on a filesystem's sizes, when known."""
    if sizes is None:
        return used
    return msgspec.structs.replace(sizes, time=used.time, used_bytes=used.used_bytes, inodes_used=used.inodes_used)


def _network(now: float, interfaces: list[Interface] | None) -> Network | None:
    return Network(time=now, interfaces=tuple(interfaces)) if interfaces is not None else None


def _some_files(usage: Usage | None) -> Usage | None:
    return usage if usage is not None and usage.inodes_used else None


# Volume.type walks the struct's fields: too slow for every volume of every request.
_MEASURED_VOLUMES = tuple((attr, PLUGINS[api]) for attr, api in (
    ("empty_dir", "emptyDir"), ("config_map", "configMap"), ("secret", "secret"),
    ("downward_api", "downwardAPI"), ("projected", "projected"),
))


def _measured_volumes(volumes) -> list[tuple[str, str]]:
    """(name, plugin folder) of the volumes Go reports metrics for: not hostPath and the like."""
    out = []
    for volume in volumes:
        plugin = next((p for attr, p in _MEASURED_VOLUMES if getattr(volume, attr) is not None), None)
        if plugin is not None:
            out.append((volume.name, plugin))
    return out


# -- CRI messages into readings -------------------------------------------------------------


def _listed_sandbox(s: api_pb2.PodSandbox) -> ListedSandbox:
    return ListedSandbox(
        id=s.id, name=s.metadata.name, namespace=s.metadata.namespace, uid=s.metadata.uid,
        created_at=s.created_at / 1e9, ready=s.state == api_pb2.SANDBOX_READY,
    )


def _listed_container(c: api_pb2.Container) -> ListedContainer:
    return ListedContainer(
        id=c.id, sandbox_id=c.pod_sandbox_id, name=c.labels.get(CONTAINER_NAME_LABEL, c.metadata.name),
        created_at=c.created_at / 1e9, running=c.state == api_pb2.CONTAINER_RUNNING,
    )


def _value(message: Any, field: str) -> int | None:
    return getattr(message, field).value if message.HasField(field) else None


def _cri_cpu(parent: Any) -> Cpu | None:
    """The cumulative usage; the runtime's usageNanoCores is not used (containerd 1.6 says
    0 for a first reading and keeps one cache for all its callers, containerd#9531)."""
    if not parent.HasField("cpu") or not parent.cpu.HasField("usage_core_nano_seconds"):
        return None
    return Cpu(time=parent.cpu.timestamp / 1e9, usage_core_nano_seconds=parent.cpu.usage_core_nano_seconds.value)


def _cri_memory(parent: Any) -> Memory | None:
    if not parent.HasField("memory") or not parent.memory.timestamp:
        return None
    m = parent.memory
    return Memory(
        time=m.timestamp / 1e9,
        available_bytes=_value(m, "available_bytes") or None,  # containerd: 0 for no limit
        usage_bytes=_value(m, "usage_bytes"), working_set_bytes=_value(m, "working_set_bytes"),
        rss_bytes=_value(m, "rss_bytes"), page_faults=_value(m, "page_faults"),
        major_page_faults=_value(m, "major_page_faults"),
    )


def _container_sample(stats: api_pb2.ContainerStats, *, taken_at: float) -> ContainerSample:
    layer = stats.writable_layer if stats.HasField("writable_layer") else None
    return ContainerSample(
        cpu=_cri_cpu(stats), memory=_cri_memory(stats),
        # containerd 1.6 sets no timestamp on the writable layer: the sample's time then.
        writable_layer=Fs(
            time=layer.timestamp / 1e9 if layer.timestamp else taken_at,
            used_bytes=_value(layer, "used_bytes"), inodes_used=_value(layer, "inodes_used"),
        ) if layer is not None else None,
        mountpoint=layer.fs_id.mountpoint if layer is not None else "",
    )


def _sandboxes_sample(stats: list[api_pb2.PodSandboxStats], *, taken_at: float) -> CriSample:
    containers: dict[str, ContainerSample] = {}
    sandboxes: dict[str, SandboxSample] = {}
    for pod in stats:
        linux = pod.linux
        for container in linux.containers:
            containers[container.attributes.id] = _container_sample(container, taken_at=taken_at)
        network = None
        if linux.HasField("network") and linux.network.timestamp:
            usages = [*([linux.network.default_interface] if linux.network.HasField("default_interface") else []),
                      *linux.network.interfaces]
            interfaces: dict[str, Interface] = {}
            for usage in usages:
                interfaces.setdefault(usage.name, Interface(
                    name=usage.name, rx_bytes=_value(usage, "rx_bytes"), rx_errors=_value(usage, "rx_errors"),
                    tx_bytes=_value(usage, "tx_bytes"), tx_errors=_value(usage, "tx_errors"),
                ))
            network = Network(time=linux.network.timestamp / 1e9, interfaces=tuple(interfaces.values()))
        sandboxes[pod.attributes.id] = SandboxSample(
            cpu=_cri_cpu(linux), memory=_cri_memory(linux), network=network,
            process_count=_value(linux.process, "process_count") if linux.HasField("process") else None,
        )
    return CriSample(taken_at=taken_at, containers=containers, sandboxes=sandboxes)


async def _all(*calls: Callable[[], Awaitable[None]]) -> None:
    """Run the calls side by side; the first error is raised as itself (not in a group),
    so that callers catch CriError as from a single call."""
    try:
        async with trio.open_nursery() as nursery:
            for call in calls:
                nursery.start_soon(call)
    except BaseExceptionGroup as group:
        first: BaseException = group
        while isinstance(first, BaseExceptionGroup):
            first = first.exceptions[0]
        raise first from None
