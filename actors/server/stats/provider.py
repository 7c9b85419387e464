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

from pykubelet.actors.runtime_link import RuntimeHandle
from pykubelet.actors.volumes.manager import PLUGINS
from pykubelet.messages.cri_api import api_pb2
from pykubelet.messages.pod import PodList
from pykubelet.pods import stats_summary as summary
from pykubelet.pods.resource_metrics import resource_metrics
from pykubelet.pods.labels import MANAGED_LABEL
from pykubelet.pods.stats_summary import CpuUsageCache, ListedContainer, ListedSandbox, Usage
from pykubelet.ports import node_stats
from pykubelet.ports.cri import CriCallError, CriClient, CriError
from pykubelet.ports.node_stats import CgroupMounts, ReadPlan, Readings
from pykubelet.supervisor.verbosity import V

from ..http import Request, Response
from .cri_stats import ContainerSample, CriSample, container_sample, listed_container, listed_sandbox, sandboxes_sample
from .summary_parts import SummaryParts

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
        pods = summary.shown([listed_sandbox(s) for s in got["sandboxes"]],
                             [listed_container(c) for c in got["containers"]])
        if self.state.mounts is None:
            self.state.mounts = await trio.to_thread.run_sync(node_stats.read_cgroup_mounts)
        plan = self._plan(pods, got["sample"], got.get("image_fs"), full=not only_cpu_and_memory)
        readings = await trio.to_thread.run_sync(node_stats.read_all, plan)
        self._remember(plan, readings)
        parts = SummaryParts(plan, readings, got["sample"], got.get("image_fs"), self.state.cpu)
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
                state.sample = sandboxes_sample(stats, taken_at=now)
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
                containers = {s.attributes.id: container_sample(s, taken_at=now) for s in stats}
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
