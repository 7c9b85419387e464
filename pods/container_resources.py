"""What a pod's cgroups get: CPU shares and CFS quota, memory and hugepage limits, the OOM
score (Go: pkg/kubelet/cm's ResourceConfigForPod,
kuberuntime's generateLinuxContainerResources, qos.GetContainerOOMScoreAdjust). Pure; the
pod worker and the cgroup manager read it and do the writing."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from pykubelet.messages.pod import Container, Pod

from .actions import is_sidecar
from .manifest import CONFIG_MIRROR, CONFIG_SOURCE
from .resources import parse_quantity, qos_class

MIN_SHARES = 2  # the kernel's bounds for cpu.shares
MAX_SHARES = 262144
SHARES_PER_CPU = 1024
MILLI_CPU_TO_CPU = 1000
QUOTA_PERIOD = 100000  # us: the kubelet's default cpuCFSQuotaPeriod, 100ms
MIN_QUOTA_PERIOD = 1000  # us: the kernel refuses a cfs_quota_us under 1ms

GUARANTEED_OOM_SCORE_ADJ = -997
BESTEFFORT_OOM_SCORE_ADJ = 1000
SYSTEM_CRITICAL_PRIORITY = 2000000000  # Go: scheduling.SystemCriticalPriority
SYSTEM_NODE_CRITICAL = "system-node-critical"

HUGEPAGES_PREFIX = "hugepages-"
_HUGEPAGE_UNITS = ("B", "KB", "MB", "GB", "TB", "PB")


def milli_cpu_to_shares(milli_cpu: int) -> int:
    """cpu.shares for a cpu request (Go's MilliCPUToShares): 1024 a core, kept in the
    kernel's [2, 262144]; no request gets 2, the kernel's floor, not its default 1024."""
    if milli_cpu == 0:
        return MIN_SHARES
    return min(max(milli_cpu * SHARES_PER_CPU // MILLI_CPU_TO_CPU, MIN_SHARES), MAX_SHARES)


def milli_cpu_to_quota(milli_cpu: int, period_us: int = QUOTA_PERIOD) -> int:
    """cfs_quota_us for a cpu limit over period_us (Go's MilliCPUToQuota): 0 when there is
    no limit (the runtime leaves the quota unset), and never under the kernel's 1ms."""
    if milli_cpu == 0:
        return 0
    return max(milli_cpu * period_us // MILLI_CPU_TO_CPU, MIN_QUOTA_PERIOD)


# --- quantities ------------------------------------------------------------------------


def _amount(resource: str, text: str) -> int:
    # cpu counts in millicores, everything else in units (bytes for memory, storage and
    # hugepages); both round up, as Go's Quantity.MilliValue and Value do.
    scale = MILLI_CPU_TO_CPU if resource == "cpu" else 1
    return math.ceil(parse_quantity(text) * scale)


def _amounts(quantities: Mapping[str, str]) -> dict[str, int]:
    return {name: _amount(name, text) for name, text in quantities.items()}


def container_requests(container: Container) -> dict[str, int]:
    """The container's requests, a missing one defaulted to its limit as the API server's
    defaulting (and the kubelet's decoding of static pods) does."""
    resources = container.resources
    return _amounts({**resources.limits, **resources.requests}) if resources else {}


def container_limits(container: Container) -> dict[str, int]:
    resources = container.resources
    return _amounts(resources.limits) if resources else {}


def _aggregate(
    pod: Pod, amounts: Callable[[Container], dict[str, int]], each: Callable[[dict[str, int]], None] | None = None
) -> dict[str, int]:
    # Go's AggregateContainerRequests/Limits: app containers and sidecars run together and
    # add up; a plain init container runs beside the sidecars started before it, so the pod
    # needs the larger of the two. `each` (Go's ContainerFn) sees what is needed while each
    # container runs.
    total: dict[str, int] = {}
    sidecars: dict[str, int] = {}
    init_peak: dict[str, int] = {}
    for container in pod.spec.containers:
        own = amounts(container)
        if each is not None:
            each(own)
        _add(total, own)
    for container in pod.spec.init_containers:
        own = amounts(container)
        if is_sidecar(container):
            _add(total, own)
            _add(sidecars, own)
            running = dict(sidecars)
        else:
            running = dict(own)
            _add(running, sidecars)
        if each is not None:
            each(running)
        _max(init_peak, running)
    _max(total, init_peak)
    return total


def _add(into: dict[str, int], more: Mapping[str, int]) -> None:
    for name, value in more.items():
        into[name] = into.get(name, 0) + value


def _max(into: dict[str, int], other: Mapping[str, int]) -> None:
    for name, value in other.items():
        if name not in into or value > into[name]:
            into[name] = value


def pod_requests(pod: Pod) -> dict[str, int]:
    """What the pod requests, as component-helpers' PodRequests: app containers and sidecars
    add up, an init container counts with the sidecars started before it and the larger
    wins, spec.overhead is added. cpu in millicores, the rest in units (bytes)."""
    requests = _aggregate(pod, container_requests)
    _add(requests, _amounts(pod.spec.overhead))
    return requests


def pod_limits(pod: Pod) -> dict[str, int]:
    """The pod's limits, as PodLimits: aggregated like requests; overhead is added only to a
    limit that is set and non-zero, for an unset limit means unbounded."""
    return _pod_limits(pod, None)


def _pod_limits(pod: Pod, each: Callable[[dict[str, int]], None] | None) -> dict[str, int]:
    limits = _aggregate(pod, container_limits, each)
    for name, text in pod.spec.overhead.items():
        if limits.get(name):
            limits[name] += _amount(name, text)
    return limits


def hugepage_limits(amounts: Mapping[str, int]) -> dict[int, int]:
    """{page size in bytes: bytes} for the hugepages-<size> entries (Go's HugePageLimits);
    "hugepages-2Mi" and "hugepages-2097152" name the same size and add up."""
    limits: dict[int, int] = {}
    for name, value in amounts.items():
        page_size = _hugepage_size(name)
        if page_size is not None:
            limits[page_size] = limits.get(page_size, 0) + value
    return limits


def _hugepage_size(resource: str) -> int | None:
    if not resource.startswith(HUGEPAGES_PREFIX):
        return None
    try:
        return math.ceil(parse_quantity(resource.removeprefix(HUGEPAGES_PREFIX)))
    except ValueError:
        return None  # validation refuses such a name; the kubelet skips it


def hugepage_unit_size(page_size: int) -> str | None:
    """The runtime's page size name for a size in bytes (2097152 is "2MB", 1Gi "1GB"), as
    Go's HugePageUnitSizeFromByteSize and runc's HugePageSizes spell it; None for a size
    no unit divides (no kernel has such pages)."""
    index = 0
    while page_size % 1024 == 0 and index < len(_HUGEPAGE_UNITS) - 1:
        page_size //= 1024
        index += 1
    if page_size > 1024 and index < len(_HUGEPAGE_UNITS) - 1:
        return None
    return f"{page_size}{_HUGEPAGE_UNITS[index]}"


# --- critical pods and the OOM score ---------------------------------------------------


def is_critical_pod(pod: Pod) -> bool:
    """Go's IsCriticalPod: a static pod, a mirror pod, or priority at least
    system-cluster-critical's."""
    annotations = pod.metadata.annotations
    static = annotations.get(CONFIG_SOURCE, "api") != "api"
    priority = pod.spec.priority or 0
    return static or CONFIG_MIRROR in annotations or priority >= SYSTEM_CRITICAL_PRIORITY


def is_node_critical_pod(pod: Pod) -> bool:
    """Go's IsNodeCriticalPod: critical and of priority class system-node-critical. Only
    these get the Guaranteed OOM score whatever their QoS class."""
    return is_critical_pod(pod) and pod.spec.priority_class_name == SYSTEM_NODE_CRITICAL


def oom_score_adjust(pod: Pod, container: Container, memory_capacity: int) -> int:
    """oom_score_adj for a container (Go's GetContainerOOMScoreAdjust). Guaranteed pods are
    killed last (-997), BestEffort first (1000); a Burstable container scores lower the
    more memory it requests (1000 - 1000*request/capacity), kept within [3, 999] so the
    tiers never meet. A sidecar scores no higher than the pod's smallest app container,
    so it is not killed before the containers it serves."""
    if is_node_critical_pod(pod):
        return GUARANTEED_OOM_SCORE_ADJ
    qos = qos_class(pod)
    if qos == "Guaranteed":
        return GUARANTEED_OOM_SCORE_ADJ
    if qos == "BestEffort":
        return BESTEFFORT_OOM_SCORE_ADJ
    score = _burstable_score(container_requests(container).get("memory", 0), memory_capacity)
    if _is_pod_sidecar(pod, container) and pod.spec.containers:
        smallest = min(container_requests(c).get("memory", 0) for c in pod.spec.containers)
        score = min(score, _burstable_score(smallest, memory_capacity))
    if score < 1000 + GUARANTEED_OOM_SCORE_ADJ:
        return 1000 + GUARANTEED_OOM_SCORE_ADJ
    if score == BESTEFFORT_OOM_SCORE_ADJ:
        return BESTEFFORT_OOM_SCORE_ADJ - 1
    return score


def _burstable_score(memory_request: int, memory_capacity: int) -> int:
    return 1000 - 1000 * memory_request // memory_capacity


def _is_pod_sidecar(pod: Pod, container: Container) -> bool:
    return is_sidecar(container) and any(c.name == container.name for c in pod.spec.init_containers)


# --- a container's resources (CRI LinuxContainerResources) -----------------------------


@dataclass(frozen=True)
class LinuxResources:
    """What CreateContainer's linux.resources carries (the fields pykubelet sets)."""

    cpu_shares: int
    cpu_quota: int = 0  # 0: unset; the runtime leaves the quota alone
    cpu_period: int = 0
    memory_limit_in_bytes: int = 0  # 0: unlimited
    memory_swap_limit_in_bytes: int = 0
    oom_score_adj: int = 0
    hugepage_limits: dict[str, int] = field(default_factory=dict)  # {"2MB": bytes}
    unified: dict[str, str] = field(default_factory=dict)  # cgroup v2 files


def container_linux_resources(
    pod: Pod,
    container: Container,
    *,
    memory_capacity: int,
    cpu_cfs_quota: bool = True,
    cpu_cfs_quota_period_us: int = QUOTA_PERIOD,
    cgroup_v2: bool = False,
    single_process_oom_kill: bool = False,
    swap_controller: bool = False,
    host_hugepage_sizes: Sequence[str] | None = None,
) -> LinuxResources:
    """A container's CRI resources, as Go's generateLinuxContainerResources with default
    feature gates. Shares come from the cpu request (defaulted to the limit); the quota
    from the limit, with the period always sent when cpuCFSQuota is on. On cgroup v2 the
    kernel kills the whole container on OOM (memory.oom.group) unless
    singleProcessOOMKill. Swap is NoSwap, the default: where the node has a swap
    controller, v2 gets memory.swap.max 0 and v1 a memsw limit equal to the memory limit.
    host_hugepage_sizes (runc's HugePageSizes: "2MB", "1GB") makes every size the host
    has explicit, 0 unless the container asks for it; None lists only what it asks for."""
    requests, limits = container_requests(container), container_limits(container)
    quota = period = 0
    if cpu_cfs_quota:
        period = cpu_cfs_quota_period_us
        quota = milli_cpu_to_quota(limits.get("cpu", 0), period)
    memory_limit = limits.get("memory", 0)
    unified: dict[str, str] = {}
    if cgroup_v2 and not single_process_oom_kill:
        unified["memory.oom.group"] = "1"
    if swap_controller and cgroup_v2:
        unified["memory.swap.max"] = "0"
    swap_limit = memory_limit if swap_controller and not cgroup_v2 else 0
    return LinuxResources(
        cpu_shares=milli_cpu_to_shares(requests.get("cpu", 0)),
        cpu_quota=quota,
        cpu_period=period,
        memory_limit_in_bytes=memory_limit,
        memory_swap_limit_in_bytes=swap_limit,
        oom_score_adj=oom_score_adjust(pod, container, memory_capacity),
        hugepage_limits=_container_hugepages(limits, host_hugepage_sizes),
        unified=unified,
    )


def _container_hugepages(limits: Mapping[str, int], host_sizes: Sequence[str] | None) -> dict[str, int]:
    asked = {unit: value for size, value in hugepage_limits(limits).items() if (unit := hugepage_unit_size(size))}
    if host_sizes is None:
        return asked
    return {size: asked.get(size, 0) for size in host_sizes}


# --- the pod's cgroup (Go's ResourceConfig) --------------------------------------------


@dataclass(frozen=True)
class ResourceConfig:
    """What the pod cgroup is set to; None leaves a file at the kernel's default."""

    cpu_shares: int | None = None
    cpu_quota: int | None = None  # -1: unlimited
    cpu_period: int | None = None
    memory_limit: int | None = None
    pids_limit: int | None = None
    hugepage_limits: dict[int, int] = field(default_factory=dict)  # {page size: bytes}


def pod_resource_config(
    pod: Pod, *, cpu_cfs_quota: bool = True, period_us: int = QUOTA_PERIOD, pod_pids_limit: int = -1
) -> ResourceConfig:
    """The pod cgroup's settings (Go's ResourceConfigForPod, and the pids limit
    podContainerManager adds). Guaranteed: shares, quota and memory limit. Burstable:
    shares; a quota or memory limit only when every container running at any time has one,
    for one unlimited container leaves the pod unbounded. BestEffort: 2 shares, nothing
    else. Hugepages are bounded by the pod's requests."""
    declared = {"cpu": True, "memory": True}

    def check(running: dict[str, int]) -> None:
        for name in declared:
            if not running.get(name):
                declared[name] = False

    requests, limits = pod_requests(pod), _pod_limits(pod, check)
    shares = milli_cpu_to_shares(requests.get("cpu", 0))
    quota = milli_cpu_to_quota(limits.get("cpu", 0), period_us) if cpu_cfs_quota else -1
    memory = limits.get("memory", 0)
    pids = pod_pids_limit if pod_pids_limit > 0 else None
    pages = hugepage_limits(requests)
    qos = qos_class(pod)
    if qos == "BestEffort":
        return ResourceConfig(cpu_shares=MIN_SHARES, pids_limit=pids, hugepage_limits=pages)
    cpu_bounded = qos == "Guaranteed" or declared["cpu"]
    memory_bounded = qos == "Guaranteed" or declared["memory"]
    return ResourceConfig(
        cpu_shares=shares,
        cpu_quota=quota if cpu_bounded else None,
        cpu_period=period_us if cpu_bounded else None,
        memory_limit=memory if memory_bounded else None,
        pids_limit=pids,
        hugepage_limits=pages,
    )


def qos_cgroup_cpu_shares(pods: Iterable[Pod]) -> dict[str, int]:
    """cpu.shares of the QoS cgroups (Go's setCPUCgroupConfig): burstable gets the shares
    of all Burstable pods' cpu requests summed (not of their shares summed), so the tier
    competes with Guaranteed pods by what it asked for; besteffort always gets 2."""
    return qos_cgroup_cpu_shares_of(sum(burstable_cpu_request(pod) for pod in pods))


def burstable_cpu_request(pod: Pod) -> int:
    """What the pod adds to the burstable tier's cpu requests, in millicores (0 unless Burstable)."""
    return pod_requests(pod).get("cpu", 0) if qos_class(pod) == "Burstable" else 0


def qos_cgroup_cpu_shares_of(burstable_milli_cpu: int) -> dict[str, int]:
    """qos_cgroup_cpu_shares from the Burstable pods' cpu requests already summed."""
    return {"burstable": milli_cpu_to_shares(burstable_milli_cpu), "besteffort": MIN_SHARES}
