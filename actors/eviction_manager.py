"""The eviction manager (Go: pkg/kubelet/eviction/eviction_manager.go): every monitoring period it
observes the node's signals (ports/node_signals.py, in a worker thread), works out which thresholds
are met, publishes the node's pressure conditions on the NodePressure board (node status and
admission read it), frees what the node can free itself, and when it must, sends one EvictPod to
the sync loop for the first pod ranked for the starved resource. The decisions are pure:
pods/eviction_thresholds.py, pods/eviction_ranking.py, pods/eviction.py.

Wiring, in actors/root.py: a child started after "sync-loop" (it sends there), best last in the
rest_for_one list, after "log-rotation", since nothing depends on it and a crash of it should
restart only itself (it loses at most the grace periods under way; the board keeps the conditions'
transition times). With DaemonSettings.eviction: EvictionSettings | None and a CgroupManager
self.cgroups (None without pod cgroups):

    self.pressure = NodePressure()  # in Daemon.__init__; node status and admission read it
    ...
    *([ChildSpec(
        "eviction-manager",
        eviction_manager_actor(
            settings.eviction, pressure=self.pressure, runtime=self.runtime,
            active_pods=lambda: [p for p in self.statuses.pods() if p.metadata.uid in self.desired.uids
                                 and p.status.phase not in ("Succeeded", "Failed")],
            pod_cgroup=lambda pod: cgroupfs_path(pod_cgroup_name(pod)) if self.cgroups else None,
            cgroups=self.cgroups, reclaim=self._reclaim, metrics=self.metrics,
        ),
    )] if settings.eviction is not None else []),

where `async def _reclaim(self, action: NodeReclaim)` runs a container GC round for
DELETE_ALL_UNUSED_CONTAINERS and removes every unused image for DELETE_UNUSED_IMAGES (Go's
DeleteUnusedImages, not bounded by the image GC thresholds).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import trio
from prometheus_client import CollectorRegistry, Counter, Histogram

from pykubelet.actors.node_pressure import NodePressure
from pykubelet.actors.runtime_link import RuntimeHandle
from pykubelet.messages.cri_api import api_pb2
from pykubelet.messages.pod import Pod
from pykubelet.messages.pod_updates import EvictPod
from pykubelet.pods.eviction import Eviction, local_storage_eviction, threshold_eviction
from pykubelet.pods.eviction_ranking import (
    FsUsage,
    disk_ranking,
    is_critical_pod,
    pod_resource,
    pod_to_evict,
    rank_for_disk,
    rank_for_memory,
    rank_for_pids,
)
from pykubelet.pods.eviction_thresholds import (
    SIGNAL_RESOURCE,
    NodeReclaim,
    Observation,
    QuantityFormat,
    Signal,
    Threshold,
    format_quantity,
    merge_thresholds,
    node_conditions,
    node_conditions_last_observed,
    node_conditions_observed_since,
    node_reclaim_functions,
    sort_by_eviction_priority,
    threshold_quantity,
    thresholds_first_observed,
    thresholds_met,
    thresholds_met_grace_period,
    thresholds_with_new_stats,
    with_container_fs_thresholds,
)
from pykubelet.pods.labels import CONTAINER_NAME_LABEL, POD_UID_LABEL
from pykubelet.ports.cgroups import CgroupManager
from pykubelet.ports.cri import CriError
from pykubelet.ports.node_signals import NodeSignalReader, PodUsage, RateLimitedWarnings
from pykubelet.supervisor import ActorContext

log = logging.getLogger("pykubelet.eviction")

SYNC_LOOP = "root/sync-loop"
POD_CLEANUP_TIMEOUT = 30.0  # Go's podCleanupTimeout
POD_CLEANUP_POLL = 1.0  # Go's podCleanupPollFreq
STORAGE_BUDGET = 5.0  # seconds of disk walking per pass; pods not reached have no stats this pass
_MEMORY_SIGNALS = (Signal.MEMORY_AVAILABLE, Signal.ALLOCATABLE_MEMORY_AVAILABLE)

RunSync = Callable[..., Awaitable]
Reclaim = Callable[[NodeReclaim], Awaitable[None]]


@dataclass(frozen=True)
class EvictionSettings:
    """Go kubelet names and defaults: evictionPressureTransitionPeriod 5m, evictionMaxPodGracePeriod 0,
    localStorageCapacityIsolation true, evictionMonitoringPeriod 10s. `thresholds` from
    parse_thresholds(); `allocatable_memory` and `kubepods_cgroup` for allocatableMemory.available."""

    thresholds: list[Threshold]
    pressure_transition_period: float = 300.0
    max_pod_grace_period: int = 0
    local_storage_capacity_isolation: bool = True
    monitoring_period: float = 10.0
    root_dir: str = "/var/lib/pykubelet"
    pod_logs_dir: str = "/var/log/pods"
    allocatable_memory: int | None = None
    kubepods_cgroup: str | None = None

    def __post_init__(self) -> None:
        if self.monitoring_period <= 0:
            raise ValueError(f"eviction monitoring period {self.monitoring_period}s: must be positive")
        if self.pressure_transition_period < 0:
            raise ValueError(
                f"evictionPressureTransitionPeriod {self.pressure_transition_period}s: must not be negative")


class EvictionMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        # prometheus_client exposes a counter with "_total": kubelet_evictions_total.
        self.evictions = Counter(
            "kubelet_evictions", "Cumulative number of pod evictions by eviction signal",
            ["eviction_signal"], registry=registry,
        )
        self.stats_age = Histogram(
            "kubelet_eviction_stats_age_seconds",
            "Time between when stats are collected, and when pod is evicted based on those stats by eviction signal",
            ["eviction_signal"], registry=registry,
        )


def eviction_manager_actor(
    settings: EvictionSettings,
    *,
    pressure: NodePressure,
    runtime: RuntimeHandle,
    active_pods: Callable[[], list[Pod]],
    pod_cgroup: Callable[[Pod], str | None],
    cgroups: CgroupManager | None,
    reclaim: Reclaim,
    metrics: CollectorRegistry,
    signals: NodeSignalReader | None = None,
    run_sync: RunSync | None = None,
    sync_loop: str = SYNC_LOOP,
):
    """`signals`: the reader of the node (tests give a fake one); `run_sync(fn)` runs its calls (a
    worker thread; tests run them inline so that the autojump clock does not move meanwhile)."""
    reader = signals or NodeSignalReader(
        root_dir=settings.root_dir, pod_logs_dir=settings.pod_logs_dir, cgroups=cgroups,
        allocatable_memory=settings.allocatable_memory, kubepods_cgroup=settings.kubepods_cgroup,
    )
    eviction_metrics = EvictionMetrics(metrics)  # once: a restarted incarnation keeps the series

    async def run(ctx: ActorContext) -> None:
        manager = EvictionManager(
            settings, pressure=pressure, runtime=runtime, active_pods=active_pods, pod_cgroup=pod_cgroup,
            reclaim=reclaim, metrics=eviction_metrics, signals=reader, run_sync=run_sync or _in_thread,
            evict=lambda message: ctx.registry.lookup(sync_loop).send(message),
        )
        while True:
            started = trio.current_time()
            evicted = await manager.synchronize()
            if evicted:
                await manager.wait_for_cleanup(evicted)
            else:
                await trio.sleep_until(started + settings.monitoring_period)

    return run


async def _in_thread(fn: Callable[[], object]) -> object:
    # A disk walk abandoned at shutdown only reads: nothing to wait for.
    return await trio.to_thread.run_sync(fn, abandon_on_cancel=True)


@dataclass
class _ContainerStats:
    """CRI ListContainerStats by pod UID and container name (the latest attempt)."""

    layers: dict[str, dict[str, FsUsage]] = field(default_factory=dict)
    memory: dict[str, dict[str, int]] = field(default_factory=dict)


class EvictionManager:
    """One synchronize at a time; keeps Go's managerImpl state: when each threshold was first met,
    when each condition was last seen, the thresholds met and the last observations."""

    def __init__(
        self, settings: EvictionSettings, *, pressure: NodePressure, runtime: RuntimeHandle,
        active_pods: Callable[[], list[Pod]], pod_cgroup: Callable[[Pod], str | None], reclaim: Reclaim,
        metrics: EvictionMetrics, signals: NodeSignalReader, run_sync: RunSync,
        evict: Callable[[EvictPod], Awaitable[None]],
    ) -> None:  # fmt: skip
        self.settings = settings
        self.pressure, self.runtime, self.active_pods, self.pod_cgroup = pressure, runtime, active_pods, pod_cgroup
        self.reclaim, self.metrics, self.signals, self.run_sync, self.evict = reclaim, metrics, signals, run_sync, evict
        self.warnings = RateLimitedWarnings(log)
        self.thresholds = list(settings.thresholds)
        self.dedicated_image_fs: bool | None = None  # known once the runtime names its image filesystem
        self.image_fs: str | None = None
        self.first_observed: dict[Threshold, float] = {}
        self.conditions_observed_at: dict[str, float] = dict(pressure.conditions_observed_at)
        self.met: list[Threshold] = []
        self.last_observations: dict[Signal, Observation] = {}
        self._reclaiming: str | None = None

    async def synchronize(self) -> list[str]:
        """One pass of Go's synchronize; the UIDs of the pods it evicted."""
        settings = self.settings
        if not self.thresholds and not settings.local_storage_capacity_isolation:
            return []
        active = self.active_pods()
        image_fs = await self._image_fs()
        if self.dedicated_image_fs is None and image_fs is not None:
            await self._learn_filesystems(image_fs)
        observations = await self._observe(image_fs)
        now = trio.current_time()
        acting = sort_by_eviction_priority(self._track(observations, now))

        if settings.local_storage_capacity_isolation:
            evicted = await self._local_storage_eviction(active)
            if evicted:
                return evicted
        threshold = next((t for t in acting if t.signal in SIGNAL_RESOURCE), None)
        if threshold is None:
            self._reclaiming = None
            return []
        resource = SIGNAL_RESOURCE[threshold.signal]
        if self._reclaiming != resource:  # said once per episode, not every pass
            log.info("eviction manager: attempting to reclaim %s (%s)", resource, threshold.signal)
            self._reclaiming = resource
        if await self._reclaim_node_level(threshold.signal, image_fs):
            log.info("eviction manager: able to reduce %s pressure without evicting pods", resource)
            return []
        if not active:
            self.warnings.warn("no-pods", "eviction manager: thresholds met, but no pods are active to evict")
            return []
        ranked, container_usage = await self._rank(threshold.signal, active)
        for met_threshold in acting:
            observed = observations.get(met_threshold.signal)
            if observed is not None and observed.time is not None:
                self.metrics.stats_age.labels(met_threshold.signal.value).observe(now - observed.time)
        pod = pod_to_evict(ranked)
        if pod is None:
            self.warnings.warn("no-evictable", "eviction manager: unable to evict any pods from the node "
                               "(only critical pods are left)")  # fmt: skip
            return []
        eviction = threshold_eviction(
            pod, threshold=threshold, thresholds=acting, observations=observations,
            container_usage=container_usage.get(pod.metadata.uid), max_pod_grace_period=settings.max_pod_grace_period,
        )
        await self._evict(pod, eviction, _below(threshold, observations[threshold.signal]))
        return [pod.metadata.uid]

    def _track(self, observations: dict[Signal, Observation], now: float) -> list[Threshold]:
        """Go's bookkeeping between observing and acting: the thresholds met (and those met before
        that their minimum reclaim has not yet relieved), since when, the conditions they raise held
        for the transition period and published; returns the thresholds past their grace period
        whose signal was sampled anew."""
        met = thresholds_met(self.thresholds, observations, False)
        if self.met:
            met = merge_thresholds(met, thresholds_met(self.met, observations, True))
        self.first_observed = thresholds_first_observed(met, self.first_observed, now)
        seen = node_conditions_last_observed(node_conditions(met), self.conditions_observed_at, now)
        self.conditions_observed_at = seen
        conditions = node_conditions_observed_since(seen, self.settings.pressure_transition_period, now)
        self.met = thresholds_met_grace_period(self.first_observed, now)
        self.pressure.publish(conditions=conditions, observations=observations, thresholds_met=self.met,
                              conditions_observed_at=seen, now=now)  # fmt: skip
        acting = thresholds_with_new_stats(self.met, observations, self.last_observations)
        self.last_observations = observations
        return acting

    async def wait_for_cleanup(self, uids: list[str]) -> None:
        """Until the evicted pods are no longer active, at most POD_CLEANUP_TIMEOUT (Go's waitForPodsCleanup)."""
        with trio.move_on_after(POD_CLEANUP_TIMEOUT):
            while True:
                await trio.sleep(POD_CLEANUP_POLL)
                if not set(uids) & {pod.metadata.uid for pod in self.active_pods()}:
                    log.info("eviction manager: evicted pods cleaned up: %s", ", ".join(uids))
                    return
        log.info("eviction manager: timed out waiting for evicted pods to be cleaned up: %s", ", ".join(uids))

    # -- readings ------------------------------------------------------------------------------

    async def _observe(self, image_fs: str | None) -> dict[Signal, Observation]:
        return await self.run_sync(functools.partial(self.signals.observe, image_fs=image_fs, now=trio.current_time()))

    async def _image_fs(self) -> str | None:
        """The image filesystem's mount point from CRI ImageFsInfo; the last one known when the
        runtime does not answer (then imagefs signals go unobserved until it has named one)."""
        if not self.runtime.connected:
            return self.image_fs  # the runtime link reports a runtime that is not there
        try:
            info = await self.runtime.client.image_fs_info()
        except CriError as exc:
            self.warnings.warn("image-fs-info", "eviction manager: CRI ImageFsInfo failed: %s", exc)
            return self.image_fs
        mounts = [fs.fs_id.mountpoint for fs in info.image_filesystems if fs.fs_id.mountpoint]
        if mounts:
            self.image_fs = mounts[0]
        return self.image_fs

    async def _learn_filesystems(self, image_fs: str) -> None:
        """Go's first synchronize: whether images have their own disk decides the containerfs
        thresholds, the ranking and the reclaim functions, once."""
        dedicated = await self.run_sync(functools.partial(self.signals.dedicated_image_fs, image_fs))
        if dedicated is None:
            return
        self.dedicated_image_fs = dedicated
        self.thresholds, ignored = with_container_fs_thresholds(self.settings.thresholds, dedicated_image_fs=dedicated)
        for warning in ignored:
            log.warning("eviction manager: %s", warning)

    async def _container_stats(self) -> _ContainerStats:
        out = _ContainerStats()
        try:
            stats = await self.runtime.client.list_container_stats()
        except CriError as exc:
            self.warnings.warn("container-stats", "eviction manager: CRI ListContainerStats failed: %s", exc)
            return out
        latest: dict[tuple[str, str], api_pb2.ContainerStats] = {}
        for stat in stats:
            uid = stat.attributes.labels.get(POD_UID_LABEL, "")
            name = stat.attributes.labels.get(CONTAINER_NAME_LABEL, stat.attributes.metadata.name)
            seen = latest.get((uid, name))
            if uid and (seen is None or stat.attributes.metadata.attempt > seen.attributes.metadata.attempt):
                latest[(uid, name)] = stat
        for (uid, name), stat in latest.items():
            if stat.HasField("writable_layer"):
                layer = stat.writable_layer
                out.layers.setdefault(uid, {})[name] = FsUsage(layer.used_bytes.value, layer.inodes_used.value)
            if stat.HasField("memory") and stat.memory.HasField("working_set_bytes"):
                out.memory.setdefault(uid, {})[name] = stat.memory.working_set_bytes.value
        return out

    async def _pods_usage(self, pods: list[Pod], *, memory: bool = False, processes: bool = False,
                          storage: bool = False) -> tuple[dict[str, PodUsage], _ContainerStats]:  # fmt: skip
        containers = await self._container_stats() if memory or storage else _ContainerStats()
        cgroups = {pod.metadata.uid: self.pod_cgroup(pod) for pod in pods} if memory or processes else {}
        usage = await self.run_sync(functools.partial(
            self.signals.pods_usage, pods, cgroups=cgroups, memory=memory, processes=processes,
            storage={pod.metadata.uid for pod in pods} if storage else (), layers=containers.layers,
            budget=STORAGE_BUDGET,
        ))
        return usage, containers

    # -- decisions on pods ---------------------------------------------------------------------

    async def _rank(self, signal: Signal, active: list[Pod]) -> tuple[list[Pod], dict[str, dict[str, int]]]:
        """The active pods in eviction order for `signal`, and per pod UID its containers' usage of
        the starved resource (for the eviction message; no entry: the pod has no stats)."""
        if signal in _MEMORY_SIGNALS:
            usage, containers = await self._pods_usage(active, memory=True)
            working_sets = {}
            for pod in active:
                uid = pod.metadata.uid
                measured = usage[uid].memory_working_set
                if measured is None and uid in containers.memory:  # no pod cgroup: its containers'
                    measured = sum(containers.memory[uid].values())
                if measured is not None:
                    working_sets[uid] = measured
            return rank_for_memory(active, working_sets), containers.memory
        if signal == Signal.PID_AVAILABLE:
            usage, _ = await self._pods_usage(active, processes=True)
            processes = {uid: u.processes for uid, u in usage.items() if u.processes is not None}
            return rank_for_pids(active, processes), {}
        measure, resource = disk_ranking(signal, dedicated_image_fs=bool(self.dedicated_image_fs))
        usage, _ = await self._pods_usage(active, storage=True)
        storage = {uid: u.storage for uid, u in usage.items() if u.storage is not None}
        container_usage = {
            uid: {name: (c.rootfs.bytes if c.rootfs else 0) + (c.logs.bytes if c.logs else 0)
                  for name, c in pod_storage.containers.items()}
            for uid, pod_storage in storage.items()
        }  # fmt: skip
        return rank_for_disk(active, storage, measure=measure, resource=resource), container_usage

    async def _reclaim_node_level(self, signal: Signal, image_fs: str | None) -> bool:
        """Go's reclaimNodeLevelResources: free what the node can, then True when, observed anew, no
        threshold is met any more (minimum reclaim included)."""
        actions = node_reclaim_functions(signal, dedicated_image_fs=bool(self.dedicated_image_fs))
        for action in actions:
            try:
                await self.reclaim(action)
            except Exception as exc:  # the caller's GC; eviction goes on without it
                log.warning("eviction manager: %s failed while reclaiming for %s: %s", action, signal, exc)
        if not actions:
            return False
        return not thresholds_met(self.thresholds, await self._observe(image_fs), True)

    async def _local_storage_eviction(self, active: list[Pod]) -> list[str]:
        """Go's localStorageEviction: every pod over an emptyDir sizeLimit or an ephemeral-storage
        limit goes at once. Only pods that declare such a limit are measured; critical pods never go."""
        limited = [pod for pod in active if _has_storage_limit(pod) and not is_critical_pod(pod)]
        if not limited:
            return []
        usage, _ = await self._pods_usage(limited, storage=True)
        evicted = []
        for pod in limited:
            storage = usage[pod.metadata.uid].storage
            if storage is None:
                continue
            eviction = local_storage_eviction(pod, storage, dedicated_image_fs=bool(self.dedicated_image_fs))
            if eviction is not None:
                used = format_quantity(storage.ephemeral_storage or 0)
                await self._evict(pod, eviction, f"{eviction.message.strip()} (ephemeral storage used: {used})")
                evicted.append(pod.metadata.uid)
        return evicted

    async def _evict(self, pod: Pod, eviction: Eviction, why: str) -> None:
        log.warning("eviction manager: evicting pod %s (%s): %s", pod.full_name, eviction.signal, why,
                    extra={"pod": pod.full_name, "pod_uid": pod.metadata.uid})  # fmt: skip
        await self.evict(EvictPod(
            pod_uid=pod.metadata.uid, reason=eviction.reason, message=eviction.message,
            grace_period_seconds=eviction.grace_period_seconds, disruption_target=eviction.condition is not None,
            annotations=dict(eviction.annotations),
        ))
        self.metrics.evictions.labels(eviction.signal).inc()


def _below(threshold: Threshold, observed: Observation) -> str:
    """"available 500Mi, threshold 1Gi", in the units Go's eviction message uses."""
    counts = SIGNAL_RESOURCE[threshold.signal] in ("inodes", "pids")
    available = format_quantity(observed.available, QuantityFormat.DECIMAL_SI if counts else QuantityFormat.BINARY_SI)
    kind = "hard" if threshold.hard else f"soft, grace period {threshold.grace_period:g}s"
    return f"available {available}, threshold {threshold_quantity(threshold.value, observed.capacity)} ({kind})"


def _has_storage_limit(pod: Pod) -> bool:
    sized = any(v.empty_dir is not None and v.empty_dir.size_limit for v in pod.spec.volumes)
    return sized or pod_resource(pod, "limits", "ephemeral-storage") is not None
