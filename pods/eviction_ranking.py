"""Which pod the eviction manager evicts first (Go: pkg/kubelet/eviction/helpers.go's rank functions,
eviction_manager.go's evictPod): pods are ranked for the starved resource, and the first one that is
not critical goes. Pure; the caller gives each pod's usage as the stats summary measured it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from enum import StrEnum

from pykubelet.messages.pod import Container, Pod
from pykubelet.pods.eviction_thresholds import Quantity, Signal
from pykubelet.pods.manifest import CONFIG_MIRROR
from pykubelet.pods.mirror import is_static_pod

SYSTEM_CRITICAL_PRIORITY = 2_000_000_000  # Go's scheduling.SystemCriticalPriority


def pod_priority(pod: Pod) -> int:
    """Go's PodPriority: spec.priority, 0 when the pod predates priority classes."""
    return pod.spec.priority if pod.spec.priority is not None else 0


def is_critical_pod(pod: Pod) -> bool:
    """Go's kubelettypes.IsCriticalPod: static and mirror pods (the kubelet could not admit them again
    after an eviction) and pods of system-critical priority. The kubelet never evicts them."""
    return (is_static_pod(pod) or CONFIG_MIRROR in pod.metadata.annotations
            or pod_priority(pod) >= SYSTEM_CRITICAL_PRIORITY)  # fmt: skip


def pod_to_evict(ranked: Iterable[Pod]) -> Pod | None:
    """The first ranked pod Go's evictPod does not refuse; None when only critical pods are left."""
    return next((pod for pod in ranked if not is_critical_pod(pod)), None)


# --- a pod's requests and limits ------------------------------------------------------------


def _add(total: Quantity | None, more: Quantity | None) -> Quantity | None:
    # Go's Quantity.Add keeps the format of the first non-zero operand.
    if more is None:
        return total
    if total is None or total.value == 0:
        return Quantity(more.value + (total.value if total else 0), more.format)
    return Quantity(total.value + more.value, total.format)


def _container_quantity(container: Container, kind: str, resource: str) -> Quantity | None:
    values = getattr(container.resources, kind) if container.resources else {}
    return Quantity.parse(values[resource]) if resource in values else None


def pod_resource(pod: Pod, kind: str, resource: str) -> Quantity | None:
    """component-helpers' PodRequests/PodLimits (kind "requests" or "limits") for one resource: app
    containers and sidecars add up, a plain init container runs beside the sidecars before it, the pod
    needs the larger. None when no container names the resource. Overhead not included."""
    total: Quantity | None = None
    for container in pod.spec.containers:
        total = _add(total, _container_quantity(container, kind, resource))
    sidecars: Quantity | None = None
    init_peak: Quantity | None = None
    for container in pod.spec.init_containers:
        own = _container_quantity(container, kind, resource)
        if container.restart_policy == "Always":
            total, sidecars = _add(total, own), _add(sidecars, own)
            during = sidecars
        else:
            during = _add(_add(None, own), sidecars)
        if during is not None and (init_peak is None or during.value > init_peak.value):
            init_peak = during
    if init_peak is not None and (total is None or init_peak.value > total.value):
        return init_peak
    return total


def pod_request(pod: Pod, resource: str) -> Decimal:
    """Go's GetResourceRequestQuantity: the pod's request, plus spec.overhead when it requests any."""
    request = pod_resource(pod, "requests", resource)
    value = request.value if request is not None else Decimal(0)
    if value and resource in pod.spec.overhead:
        value += Quantity.parse(pod.spec.overhead[resource]).value
    return value


# --- ranking ------------------------------------------------------------------------------


Compare = Callable[[Pod, Pod], int]  # < 0: the first pod is evicted before the second


def _cmp_bool(first: bool, second: bool) -> int:
    # Go's cmpBool: true before false.
    return 0 if first == second else (-1 if first else 1)


def _rank(pods: Iterable[Pod], *compares: Compare) -> list[Pod]:
    # Go's multiSorter; Python's sort is stable, Go's is not: pods tied on every key keep the input order.
    def compare(a: Pod, b: Pod) -> int:
        for one in compares:
            if result := one(a, b):
                return result
        return 0

    return sorted(pods, key=functools.cmp_to_key(compare))


def _by_priority(a: Pod, b: Pod) -> int:
    return (pod_priority(a) > pod_priority(b)) - (pod_priority(a) < pod_priority(b))


def _needs_stats(stats: Mapping[str, object]) -> Callable[[Compare], Compare]:
    """A comparison over measured usage; a pod without stats goes first, as in Go."""

    def wrap(compare: Compare) -> Compare:
        def guarded(a: Pod, b: Pod) -> int:
            found_a, found_b = a.metadata.uid in stats, b.metadata.uid in stats
            if not (found_a and found_b):
                return _cmp_bool(not found_a, not found_b)
            return compare(a, b)

        return guarded

    return wrap


def _usage_ranking(
    stats: Mapping[str, object],
    usage: Callable[[Pod], Decimal],
    request: Callable[[Pod], Decimal],
    baseline: Callable[[Pod], Decimal],
) -> tuple[Compare, Compare]:
    """Go's exceed*Requests and memory/disk comparisons: pods over their request first; then the most
    above `baseline` (the request, but for inodes Go subtracts the ephemeral-storage request)."""

    @_needs_stats(stats)
    def exceeds(a: Pod, b: Pod) -> int:
        return _cmp_bool(usage(a) > request(a), usage(b) > request(b))

    @_needs_stats(stats)
    def greediest(a: Pod, b: Pod) -> int:
        over_a, over_b = usage(a) - baseline(a), usage(b) - baseline(b)
        return (over_b > over_a) - (over_b < over_a)

    return exceeds, greediest


def rank_for_memory(pods: Iterable[Pod], usage: Mapping[str, int]) -> list[Pod]:
    """Go's rankMemoryPressure: pods using more memory than they request first, then lower priority,
    then the most memory above the request. `usage`: pod UID -> working set bytes."""

    def used(pod: Pod) -> Decimal:
        return Decimal(usage[pod.metadata.uid])

    def request(pod: Pod) -> Decimal:
        return pod_request(pod, "memory")

    exceeds, greediest = _usage_ranking(usage, used, request, request)
    return _rank(pods, exceeds, _by_priority, greediest)


def rank_for_pids(pods: Iterable[Pod], processes: Mapping[str, int]) -> list[Pod]:
    """Go's rankPIDPressure: lower priority first, then the most processes. `processes`: UID -> count."""

    @_needs_stats(processes)
    def most_processes(a: Pod, b: Pod) -> int:
        return processes[b.metadata.uid] - processes[a.metadata.uid]

    return _rank(pods, _by_priority, most_processes)


class FsStats(StrEnum):
    """What of a pod's disk use a disk signal counts (Go's fsStatsType)."""

    ROOT = "root"  # containers' writable layers
    LOGS = "logs"
    LOCAL_VOLUME_SOURCE = "localVolumeSource"  # emptyDir on disk, hostPath, configMap, gitRepo
    IMAGES = "images"  # named by Go, counted by nothing


class DiskResource(StrEnum):
    EPHEMERAL_STORAGE = "ephemeral-storage"
    INODES = "inodes"


@dataclass(frozen=True)
class FsUsage:
    bytes: int = 0
    inodes: int = 0


@dataclass(frozen=True)
class ContainerStorage:
    """A container's disk use; None where the stats summary has none."""

    rootfs: FsUsage | None = None
    logs: FsUsage | None = None


@dataclass(frozen=True)
class PodStorage:
    """A pod's disk use as the stats summary reports it: per container (in the summary's order), per
    volume by name, and the pod's ephemeral-storage total (podStats.ephemeral-storage.usedBytes)."""

    containers: Mapping[str, ContainerStorage] = field(default_factory=dict)
    volumes: Mapping[str, FsUsage] = field(default_factory=dict)
    ephemeral_storage: int | None = None


_ALL_FS = frozenset(FsStats)


def disk_ranking(signal: Signal, *, dedicated_image_fs: bool,
                 split_container_image_fs: bool = False) -> tuple[frozenset[FsStats], DiskResource]:  # fmt: skip
    """Go's buildSignalToRankFunc for a disk signal: what to count, and whether bytes or inodes. With an
    image filesystem apart, nodefs pressure counts logs and volumes, imagefs pressure writable layers."""
    resource = DiskResource.INODES if signal.value.endswith("inodesFree") else DiskResource.EPHEMERAL_STORAGE
    family = signal.value.split(".")[0]
    if dedicated_image_fs and not split_container_image_fs:
        node_side = {FsStats.LOGS, FsStats.LOCAL_VOLUME_SOURCE}
        measure = node_side if family == "nodefs" else {FsStats.ROOT, FsStats.IMAGES}
    elif dedicated_image_fs:
        measure = {FsStats.IMAGES} if family == "imagefs" else {FsStats.LOGS, FsStats.LOCAL_VOLUME_SOURCE, FsStats.ROOT}
    else:
        measure = _ALL_FS
    return frozenset(measure), resource


def local_volume_names(pod: Pod) -> list[str]:
    """Go's localVolumeNames: the volumes whose bytes count as the pod's (hostPath, emptyDir on the
    node's disk, configMap, gitRepo)."""
    return [
        volume.name for volume in pod.spec.volumes
        if volume.host_path is not None or volume.config_map is not None or volume.git_repo is not None
        or (volume.empty_dir is not None and volume.empty_dir.medium == "")
    ]  # fmt: skip


def pod_disk_usage(pod: Pod, storage: PodStorage, measure: Collection[FsStats]) -> FsUsage:
    """Go's podDiskUsage: the measured parts of the pod's disk use, in bytes and inodes."""
    parts: list[FsUsage | None] = []
    for container in storage.containers.values():
        if FsStats.ROOT in measure:
            parts.append(container.rootfs)
        if FsStats.LOGS in measure:
            parts.append(container.logs)
    if FsStats.LOCAL_VOLUME_SOURCE in measure:
        parts += [storage.volumes.get(name) for name in local_volume_names(pod)]
    present = [part for part in parts if part is not None]
    return FsUsage(sum(p.bytes for p in present), sum(p.inodes for p in present))


def rank_for_disk(pods: Iterable[Pod], usage: Mapping[str, PodStorage], *, measure: Collection[FsStats],
                  resource: DiskResource = DiskResource.EPHEMERAL_STORAGE) -> list[Pod]:  # fmt: skip
    """Go's rankDiskPressureFunc: pods using more than they request first, then lower priority, then the
    most disk above the ephemeral-storage request (Go subtracts that request from inodes too). `usage`:
    UID -> PodStorage; `measure` and `resource` from disk_ranking()."""

    def used(pod: Pod) -> Decimal:
        disk = pod_disk_usage(pod, usage[pod.metadata.uid], measure)
        return Decimal(disk.inodes if resource == DiskResource.INODES else disk.bytes)

    exceeds, greediest = _usage_ranking(usage, used, lambda pod: pod_request(pod, resource),
                                        lambda pod: pod_request(pod, DiskResource.EPHEMERAL_STORAGE))  # fmt: skip
    return _rank(pods, exceeds, _by_priority, greediest)
