"""What eviction does to a pod (Go: pkg/kubelet/eviction/eviction_manager.go's Admit, evictPod and
localStorageEviction; helpers.go's evictionMessage): the status and condition of an evicted pod,
the local-storage limits that evict a pod on their own, and admission while the node is under
pressure. Pure; thresholds are pods/eviction_thresholds.py's, ranking pods/eviction_ranking.py's.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field

from pykubelet.messages.pod import Pod, PodCondition, Toleration
from pykubelet.pods.admission import ADMITTED, Admission
from pykubelet.pods.eviction_ranking import PodStorage, is_critical_pod, pod_resource
from pykubelet.pods.eviction_thresholds import (
    CONDITION_ORDER,
    MEMORY_PRESSURE,
    SIGNAL_RESOURCE,
    Observation,
    Quantity,
    QuantityFormat,
    Signal,
    Threshold,
    format_quantity,
    threshold_quantity,
)
from pykubelet.pods.resources import qos_class

REASON = "Evicted"
DISRUPTION_TARGET = "DisruptionTarget"
TERMINATION_BY_KUBELET = "TerminationByKubelet"
IMMEDIATE_EVICTION_GRACE_PERIOD_SECONDS = 1  # hard thresholds and local-storage limits
MEMORY_PRESSURE_TAINT = "node.kubernetes.io/memory-pressure"

# The annotations of the Evicted event (Go's OffendingContainersKey and friends).
OFFENDING_CONTAINERS = "offending_containers"
OFFENDING_CONTAINERS_USAGE = "offending_containers_usage"
STARVED_RESOURCE = "starved_resource"

# Metric labels of local-storage evictions (Go's signal*Limit).
EMPTY_DIR_LIMIT = "emptydirfs.limit"
POD_EPHEMERAL_STORAGE_LIMIT = "ephemeralpodfs.limit"
CONTAINER_EPHEMERAL_STORAGE_LIMIT = "ephemeralcontainerfs.limit"


@dataclass(frozen=True)
class Eviction:
    """What the kubelet does to the pod it evicts: kill it with this grace period, set phase Failed with
    this reason and message and (for a threshold) the condition, record an Evicted event."""

    signal: str
    message: str
    grace_period_seconds: int
    condition: PodCondition | None = None
    annotations: Mapping[str, str] = field(default_factory=dict)
    reason: str = REASON


def _count_format(resource: str) -> QuantityFormat:
    # Go observes bytes in BinarySI and counts (inodes, PIDs) in DecimalSI.
    return QuantityFormat.DECIMAL_SI if resource in ("inodes", "pids") else QuantityFormat.BINARY_SI


def eviction_message(
    resource: str,
    pod: Pod,
    thresholds: Iterable[Threshold],
    observations: Mapping[Signal, Observation],
    container_usage: Mapping[str, int] | None,
) -> tuple[str, dict[str, str]]:
    """Go's evictionMessage and the event's annotations. The threshold named is the first one of
    `thresholds` that starves `resource` and was observed. `container_usage`: container name -> usage
    (memory working set; rootfs + logs bytes for ephemeral-storage) in the stats summary's order, None
    when the pod has no stats; containers using more than they request are named."""
    message = f"The node was low on resource: {resource}. "
    for threshold in thresholds:
        observed = observations.get(threshold.signal)
        if SIGNAL_RESOURCE.get(threshold.signal) == resource and observed is not None:
            quantity = threshold_quantity(threshold.value, observed.capacity)
            available = format_quantity(observed.available, _count_format(resource))
            message += f"Threshold quantity: {quantity}, available: {available}. "
            break
    if container_usage is None:
        return message, {}
    offending: list[str] = []
    usages: list[str] = []
    containers = {c.name: c for c in list(pod.spec.containers) + list(pod.spec.init_containers)}
    for name, used in container_usage.items():
        container = containers.get(name)
        if container is None or resource not in ("memory", "ephemeral-storage"):
            continue  # Go measures containers' memory and ephemeral storage only
        requests = container.resources.requests if container.resources else {}
        request = Quantity.parse(requests[resource]) if resource in requests else None
        if used > (request.value if request else 0):
            usage = format_quantity(used)
            message += (f"Container {name} was using {usage}, request is {request or 0}, "
                        f"has larger consumption of {resource}. ")  # fmt: skip
            offending.append(name)
            usages.append(usage)
    return message, {
        OFFENDING_CONTAINERS: ",".join(offending),
        OFFENDING_CONTAINERS_USAGE: ",".join(usages),
        STARVED_RESOURCE: resource,
    }


def threshold_eviction(
    pod: Pod,
    *,
    threshold: Threshold,
    thresholds: Iterable[Threshold],
    observations: Mapping[Signal, Observation],
    container_usage: Mapping[str, int] | None,
    max_pod_grace_period: int = 0,
) -> Eviction:
    """The eviction of `pod` to reclaim what `threshold` starves: at once (1 s) for a hard threshold,
    evictionMaxPodGracePeriod for a soft one, with the DisruptionTarget condition Go adds."""
    resource = SIGNAL_RESOURCE[threshold.signal]
    message, annotations = eviction_message(resource, pod, thresholds, observations, container_usage)
    return Eviction(
        signal=threshold.signal.value,
        message=message,
        grace_period_seconds=IMMEDIATE_EVICTION_GRACE_PERIOD_SECONDS if threshold.hard else max_pod_grace_period,
        condition=PodCondition(type=DISRUPTION_TARGET, status="True", reason=TERMINATION_BY_KUBELET, message=message),
        annotations=annotations,
    )


# --- local storage limits -------------------------------------------------------------------


def local_storage_eviction(pod: Pod, usage: PodStorage, *, dedicated_image_fs: bool) -> Eviction | None:
    """Go's localStorageEviction for one pod, checked before any threshold: an emptyDir over its
    sizeLimit, then the pod over the sum of its containers' ephemeral-storage limits, then a container
    over its own limit (its logs, plus its writable layer unless that lives on a separate image
    filesystem). The first breach evicts at once, without the DisruptionTarget condition."""
    for volume in pod.spec.volumes:
        if volume.empty_dir is None or volume.empty_dir.size_limit is None:
            continue
        limit = Quantity.parse(volume.empty_dir.size_limit)
        used = usage.volumes.get(volume.name)
        if used is not None and limit.value > 0 and used.bytes > limit.value:
            message = f"Usage of EmptyDir volume {json.dumps(volume.name)} exceeds the limit {json.dumps(str(limit))}. "
            return Eviction(EMPTY_DIR_LIMIT, message, IMMEDIATE_EVICTION_GRACE_PERIOD_SECONDS)
    pod_limit = pod_resource(pod, "limits", "ephemeral-storage")
    if pod_limit is not None:
        if "ephemeral-storage" in pod.spec.overhead:  # Go's PodLimits adds overhead to a limit that exists
            overhead = Quantity.parse(pod.spec.overhead["ephemeral-storage"])
            pod_limit = Quantity(pod_limit.value + overhead.value, pod_limit.format)
        if (usage.ephemeral_storage or 0) > pod_limit.value:
            message = f"Pod ephemeral local storage usage exceeds the total limit of containers {pod_limit}. "
            return Eviction(POD_EPHEMERAL_STORAGE_LIMIT, message, IMMEDIATE_EVICTION_GRACE_PERIOD_SECONDS)
    limits = {}
    for container in pod.spec.containers:
        declared = container.resources.limits if container.resources else {}
        if "ephemeral-storage" in declared and (limit := Quantity.parse(declared["ephemeral-storage"])).value != 0:
            limits[container.name] = limit
    for name, storage in usage.containers.items():
        used = (storage.logs.bytes if storage.logs else 0) + (
            storage.rootfs.bytes if storage.rootfs and not dedicated_image_fs else 0)  # fmt: skip
        if name in limits and used > limits[name].value:
            message = f"Container {name} exceeded its local ephemeral storage limit {json.dumps(str(limits[name]))}. "
            return Eviction(CONTAINER_EPHEMERAL_STORAGE_LIMIT, message, IMMEDIATE_EVICTION_GRACE_PERIOD_SECONDS)
    return None


# --- admission under pressure --------------------------------------------------------------


def _tolerates(toleration: Toleration, key: str, effect: str) -> bool:
    # Go's Toleration.ToleratesTaint, for a taint with no value.
    if toleration.effect and toleration.effect != effect:
        return False
    if toleration.key and toleration.key != key:
        return False
    if toleration.operator in ("", "Equal"):
        return toleration.value == ""
    return toleration.operator == "Exists"


def admit_under_pressure(pod: Pod, conditions: Collection[str]) -> Admission:
    """Go's eviction manager Admit: under MemoryPressure alone a BestEffort pod is refused unless it
    tolerates the memory-pressure taint; under any other pressure every pod is refused; critical
    pods are always admitted. `conditions`: the pressure conditions the node reports now."""
    if not conditions or is_critical_pod(pod):
        return ADMITTED
    if set(conditions) == {MEMORY_PRESSURE}:
        if qos_class(pod) != "BestEffort":
            return ADMITTED
        if any(_tolerates(t, MEMORY_PRESSURE_TAINT, "NoSchedule") for t in pod.spec.tolerations):
            return ADMITTED
    known = [c for c in CONDITION_ORDER if c in conditions]
    named = known + sorted(set(conditions) - set(known))
    return Admission(False, REASON, f"The node had condition: [{' '.join(named)}]. ")
