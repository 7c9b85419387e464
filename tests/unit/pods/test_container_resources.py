"""A pod's cgroup settings as the Go kubelet computes them: cpu shares and CFS quota, the
OOM score, component-helpers' PodRequests/PodLimits with sidecars and overhead, the pod
and QoS cgroups. Cases marked
"Go:" are the Go kubelet's own test tables."""

from __future__ import annotations

import msgspec
import pytest

from pykubelet.messages.pod import Pod
from pykubelet.pods.container_resources import (
    LinuxResources,
    ResourceConfig,
    container_linux_resources,
    hugepage_limits,
    hugepage_unit_size,
    is_critical_pod,
    is_node_critical_pod,
    milli_cpu_to_quota,
    milli_cpu_to_shares,
    oom_score_adjust,
    pod_limits,
    pod_requests,
    pod_resource_config,
    qos_cgroup_cpu_shares,
)

Mi = 2**20
GB8 = 8_000_000_000  # Go's standardMemoryAmount


def ctr(name: str = "c", requests: dict | None = None, limits: dict | None = None, **extra) -> dict:
    resources = {k: v for k, v in (("requests", requests), ("limits", limits)) if v is not None}
    return {"name": name, "image": "busybox", "resources": resources, **extra}


def sidecar(name: str = "side", requests: dict | None = None, limits: dict | None = None) -> dict:
    return ctr(name, requests, limits, restartPolicy="Always")


def pod(*containers: dict, init: tuple[dict, ...] = (), uid: str = "1234-abcd", annotations: dict | None = None,
        **spec) -> Pod:
    return msgspec.convert({"metadata": {"name": "web", "namespace": "default", "uid": uid,
                                         "annotations": annotations or {}},
                            "spec": {"containers": list(containers) or [ctr()], "initContainers": list(init),
                                     **spec}},
                           Pod)  # fmt: skip


def cpu_mem(cpu: str | None = None, memory: str | None = None) -> dict:
    return {k: v for k, v in (("cpu", cpu), ("memory", memory)) if v is not None}


# --- conversions -------------------------------------------------------------------------


@pytest.mark.parametrize("milli, shares", [
    (0, 2), (1, 2), (2, 2), (100, 102), (1000, 1024), (256000, 262144), (300000, 262144),
])  # fmt: skip
def test_milli_cpu_to_shares_is_1024_a_core_within_the_kernel_bounds(milli, shares):
    assert milli_cpu_to_shares(milli) == shares


@pytest.mark.parametrize("milli, period, quota", [
    # Go: TestMilliCPUToQuota
    (0, 100000, 0), (5, 100000, 1000), (9, 100000, 1000), (10, 100000, 1000), (200, 100000, 20000),
    (500, 100000, 50000), (1000, 100000, 100000), (1500, 100000, 150000),
    # a tuned cpuCFSQuotaPeriod scales the quota, still never under 1ms
    (200, 5000, 1000), (100, 5000, 1000), (2000, 50000, 100000),
])  # fmt: skip
def test_milli_cpu_to_quota_scales_to_the_period_with_a_1ms_floor(milli, period, quota):
    assert milli_cpu_to_quota(milli, period) == quota


# --- pod requests and limits -------------------------------------------------------------


@pytest.mark.parametrize("candidate, expected", [
    # quantities round up: 0.1 millicore is 1, 0.1 byte is 1
    (pod(ctr(requests=cpu_mem("0.0001", "100m"))), {"cpu": 1, "memory": 1}),
    # a missing request defaults to the limit
    (pod(ctr(limits=cpu_mem("500m", "1Gi"))), {"cpu": 500, "memory": 2**30}),
    (pod(ctr(requests={"ephemeral-storage": "1Gi", "hugepages-2Mi": "4Mi"})),
     {"ephemeral-storage": 2**30, "hugepages-2Mi": 4 * Mi}),
    # app containers add up; a plain init container runs alone, so the larger wins
    (pod(ctr("a", cpu_mem("100m")), ctr("b", cpu_mem("200m")), init=(ctr("i", cpu_mem("250m")),)), {"cpu": 300}),
    (pod(ctr("a", cpu_mem("100m")), init=(ctr("i", cpu_mem("500m", "1Mi")),)), {"cpu": 500, "memory": Mi}),
    # a sidecar runs beside everything after it: 300m app + 100m sidecar, or 500m init + 100m
    (pod(ctr("a", cpu_mem("300m")), init=(sidecar("s", cpu_mem("100m")), ctr("i", cpu_mem("200m")))), {"cpu": 400}),
    (pod(ctr("a", cpu_mem("300m")), init=(sidecar("s", cpu_mem("100m")), ctr("i", cpu_mem("500m")))), {"cpu": 600}),
    # ... but not beside an init container that ran before it started
    (pod(ctr("a", cpu_mem("100m")), init=(ctr("i", cpu_mem("500m")), sidecar("s", cpu_mem("100m")))), {"cpu": 500}),
])  # fmt: skip
def test_pod_requests_follow_component_helpers(candidate, expected):
    assert pod_requests(candidate) == expected


def test_pod_requests_add_the_overhead_even_to_what_no_container_requests():
    candidate = pod(ctr(requests=cpu_mem("100m")), overhead={"cpu": "250m", "memory": "120Mi"})
    assert pod_requests(candidate) == {"cpu": 350, "memory": 120 * Mi}


def test_pod_limits_add_the_overhead_only_to_limits_that_are_set():
    candidate = pod(ctr(limits=cpu_mem("1")), overhead={"cpu": "250m", "memory": "120Mi"})
    assert pod_limits(candidate) == {"cpu": 1250}


def test_pod_limits_count_sidecars_beside_later_init_containers():
    candidate = pod(ctr("a", limits=cpu_mem("1")),
                    init=(sidecar("s", limits=cpu_mem("500m")), ctr("i", limits=cpu_mem("1500m"))))  # fmt: skip
    assert pod_limits(candidate) == {"cpu": 2000}


def test_hugepage_limits_are_keyed_by_page_size_and_add_up():
    # Go: TestHugePageLimits "2Mi and 4Mi"
    amounts = {"hugepages-2Mi": 128, f"hugepages-{2 * Mi}": 256, "hugepages-4Mi": 512, "4Mi": 1024, "cpu": 5}
    assert hugepage_limits(amounts) == {2 * Mi: 384, 4 * Mi: 512}


def test_a_hugepage_name_with_an_invalid_size_is_skipped():
    assert hugepage_limits({"hugepages-2MB": 2 * Mi, "2Mi": 128}) == {}


@pytest.mark.parametrize("size, name", [(2 * Mi, "2MB"), (2**30, "1GB"), (64 * 1024, "64KB"), (1000, "1000B"),
                                        (3000, None)])  # fmt: skip
def test_hugepage_unit_size_is_runcs_page_size_name(size, name):
    assert hugepage_unit_size(size) == name


# --- critical pods and the OOM score ------------------------------------------------------

STATIC = {"kubernetes.io/config.source": "file"}


@pytest.mark.parametrize("candidate, critical, node_critical", [
    (pod(), False, False),
    (pod(annotations={"kubernetes.io/config.source": "api"}), False, False),
    (pod(annotations=STATIC), True, False),
    (pod(annotations={"kubernetes.io/config.mirror": "abc"}), True, False),
    (pod(priority=1999999999), False, False),
    (pod(priority=2000000000, priorityClassName="system-cluster-critical"), True, False),
    (pod(priority=2000001000, priorityClassName="system-node-critical"), True, True),
    (pod(annotations=STATIC, priorityClassName="system-node-critical"), True, True),
    # the class name alone, without the priority the admission plugin resolves, is not enough
    (pod(priorityClassName="system-node-critical"), False, False),
])  # fmt: skip
def test_critical_and_node_critical_pods(candidate, critical, node_critical):
    assert (is_critical_pod(candidate), is_node_critical_pod(candidate)) == (critical, node_critical)


@pytest.mark.parametrize("candidate, capacity, score", [
    # Go: TestGetContainerOOMScoreAdjust
    (pod(ctr(limits=cpu_mem("10"))), 4_000_000_000, 999),  # cpu-limit
    (pod(ctr(limits=cpu_mem(memory="0"))), 7_230_457_451, 1000),  # zero-memory-limit
    (pod(ctr()), 4_000_000_000, 1000),  # no-request-limit
    (pod(ctr(requests=cpu_mem("5m", "10G"), limits=cpu_mem("5m", "10G"))), 123_456_789, -997),
    (pod(ctr(requests=cpu_mem("5m", str(GB8 // 2)), limits=cpu_mem(memory="10G"))), GB8, 500),
    (pod(ctr(requests=cpu_mem("5m", str(GB8 - 1)))), GB8, 3),  # request-no-limit
    (pod(priority=2000000000, priorityClassName="system-cluster-critical"), 4_000_000_000, 1000),
    (pod(priority=2000001000, priorityClassName="system-node-critical"), 4_000_000_000, -997),
    (pod(ctr(requests=cpu_mem(memory=str(GB8 // 8)), limits=cpu_mem(memory=str(GB8 // 8 + 1000)))), GB8, 875),
    # Go's memory-limit-cpu-request expects 999 from a pod its test never defaulted; the API
    # server defaults the memory request to the 10G limit, over capacity: the floor, 3
    (pod(ctr(requests=cpu_mem("0"), limits=cpu_mem(memory="10G"))), GB8, 3),
    # a static pod is critical, but only system-node-critical ones score as Guaranteed
    (pod(annotations=STATIC), GB8, 1000),
    (pod(annotations=STATIC, priorityClassName="system-node-critical"), GB8, -997),
])  # fmt: skip
def test_oom_score_adjust(candidate, capacity, score):
    assert oom_score_adjust(candidate, candidate.spec.containers[0], capacity) == score


def _mem(name: str, request: int, *, is_sidecar: bool = False) -> dict:
    make = sidecar if is_sidecar else ctr
    return make(name, cpu_mem(memory=str(request)), cpu_mem(memory=str(GB8 // 8 + 1000)))


@pytest.mark.parametrize("sidecar_request, expected", [
    # Go: burstable-mixed-multi-container-{small-sidecar,sample-request,big-sidecar-container}-pod
    (GB8 // 20, {"init-container": 875, "sidecar": 875, "main-1": 875}),
    (GB8 // 8, {"init-container": 875, "sidecar": 875, "main-1": 875}),
    (GB8 // 2, {"init-container": 875, "sidecar": 500, "main-1": 875}),
])  # fmt: skip
def test_a_sidecar_scores_no_higher_than_the_smallest_app_container(sidecar_request, expected):
    candidate = pod(_mem("main-1", GB8 // 8),
                    init=(_mem("init-container", GB8 // 8), _mem("sidecar", sidecar_request, is_sidecar=True)))
    containers = [*candidate.spec.init_containers, *candidate.spec.containers]
    assert {c.name: oom_score_adjust(candidate, c, GB8) for c in containers} == expected


# --- a container's CRI resources ---------------------------------------------------------


def _linux(requests: dict | None, limits: dict | None, **options) -> LinuxResources:
    candidate = pod(ctr(requests=requests, limits=limits))
    return container_linux_resources(candidate, candidate.spec.containers[0], memory_capacity=GB8, **options)


@pytest.mark.parametrize("requests, limits, shares, quota, memory", [
    # Go: TestCalculateLinuxResources
    (cpu_mem("1"), cpu_mem("2", "128Mi"), 1024, 200000, 128 * Mi),  # Request128MBLimit256MB
    (cpu_mem("2"), cpu_mem("8", "0"), 2048, 800000, 0),  # RequestNoMemory
    (None, cpu_mem("2", "0"), 2048, 200000, 0),  # RequestNilCPU: shares from the limit
    (cpu_mem("0"), cpu_mem("2", "0"), 2, 200000, 0),  # RequestZeroCPU
    # no limit: quota 0 (unset), the period still sent
    (cpu_mem("250m"), None, 256, 0, 0),
    (None, None, 2, 0, 0),
])  # fmt: skip
def test_container_cpu_and_memory(requests, limits, shares, quota, memory):
    resources = _linux(requests, limits)
    assert (resources.cpu_shares, resources.cpu_quota, resources.cpu_period, resources.memory_limit_in_bytes) == (
        shares, quota, 100000, memory)  # fmt: skip


def test_without_cfs_quota_neither_quota_nor_period_is_set():
    resources = _linux(cpu_mem("1"), cpu_mem("2"), cpu_cfs_quota=False)
    assert (resources.cpu_quota, resources.cpu_period) == (0, 0)


def test_a_tuned_cfs_period_is_sent_with_the_quota():
    resources = _linux(cpu_mem("1"), cpu_mem("2"), cpu_cfs_quota_period_us=50000)
    assert (resources.cpu_quota, resources.cpu_period) == (100000, 50000)


@pytest.mark.parametrize("options, unified, swap", [
    ({}, {}, 0),
    ({"cgroup_v2": True}, {"memory.oom.group": "1"}, 0),
    ({"cgroup_v2": True, "single_process_oom_kill": True}, {}, 0),
    ({"cgroup_v2": True, "swap_controller": True}, {"memory.oom.group": "1", "memory.swap.max": "0"}, 0),
    ({"swap_controller": True}, {}, 128 * Mi),  # cgroup v1: memsw limit = memory limit, no swap
])  # fmt: skip
def test_oom_group_kill_and_no_swap(options, unified, swap):
    resources = _linux(cpu_mem("1"), cpu_mem("2", "128Mi"), **options)
    assert (resources.unified, resources.memory_swap_limit_in_bytes) == (unified, swap)


@pytest.mark.parametrize("limits, host_sizes, expected", [
    # Go: TestGetHugepageLimitsFromResources
    ({"hugepages-2Mi": "2Mi"}, None, {"2MB": 2 * Mi}),
    ({"hugepages-1Gi": "2Gi"}, None, {"1GB": 2 * 2**30}),
    ({"hugepages-2MB": "2Mi"}, ["2MB"], {"2MB": 0}),
    ({"cpu": "0", "hugepages-2Mi": "2Mi", "hugepages-1Gi": "2Gi"}, ["2MB", "1GB"], {"2MB": 2 * Mi, "1GB": 2 * 2**30}),
    # a size the host lacks is dropped; every size it has is explicit
    ({"hugepages-1Gi": "2Gi"}, ["2MB"], {"2MB": 0}),
])  # fmt: skip
def test_container_hugepage_limits(limits, host_sizes, expected):
    assert _linux(None, limits, host_hugepage_sizes=host_sizes).hugepage_limits == expected


def test_container_resources_carry_the_oom_score():
    assert _linux(cpu_mem(memory=str(GB8 // 8)), None).oom_score_adj == 875


# --- the pod cgroup ----------------------------------------------------------------------

GUARANTEED = ctr(requests=cpu_mem("100m", "100Mi"), limits=cpu_mem("100m", "100Mi"))
BURSTABLE = ctr(requests=cpu_mem("100m", "100Mi"), limits=cpu_mem("200m", "200Mi"))


@pytest.mark.parametrize("candidate, options, expected", [
    # Go: TestResourceConfigForPod
    (pod(ctr()), {}, ResourceConfig(cpu_shares=2)),  # besteffort
    (pod(ctr(requests=cpu_mem("100m", "100Mi"))), {}, ResourceConfig(cpu_shares=102)),  # burstable-no-limits
    (pod(BURSTABLE), {}, ResourceConfig(102, 20000, 100000, 200 * Mi)),  # burstable-with-limits
    (pod(BURSTABLE), {"cpu_cfs_quota": False}, ResourceConfig(102, -1, 100000, 200 * Mi)),
    (pod(BURSTABLE, ctr("b", requests=cpu_mem("100m", "100Mi"))), {}, ResourceConfig(cpu_shares=204)),
    (pod(BURSTABLE), {"period_us": 5000}, ResourceConfig(102, 1000, 5000, 200 * Mi)),
    (pod(BURSTABLE), {"period_us": 5000, "cpu_cfs_quota": False}, ResourceConfig(102, -1, 5000, 200 * Mi)),
    (pod(GUARANTEED), {}, ResourceConfig(102, 10000, 100000, 100 * Mi)),  # guaranteed
    (pod(GUARANTEED), {"cpu_cfs_quota": False}, ResourceConfig(102, -1, 100000, 100 * Mi)),
    (pod(GUARANTEED), {"period_us": 5000}, ResourceConfig(102, 1000, 5000, 100 * Mi)),
    # burstable-partial-limits-with-init-containers
    (pod(ctr("a", cpu_mem("100m", "100m"), cpu_mem("100m", "100Mi")), ctr("b", cpu_mem("100m", "100m")),
         init=(ctr("i", cpu_mem("100m", "100m"), cpu_mem("100m", "100Mi")), ctr("j", cpu_mem("100m", "100m")))),
     {"period_us": 5000}, ResourceConfig(cpu_shares=204)),
])  # fmt: skip
def test_pod_resource_config(candidate, options, expected):
    assert pod_resource_config(candidate, **options) == expected


def test_an_init_container_without_limits_leaves_the_pod_unbounded():
    candidate = pod(BURSTABLE, init=(ctr("i", requests=cpu_mem("100m", "100Mi")),))
    assert pod_resource_config(candidate) == ResourceConfig(cpu_shares=102)


def test_an_init_container_running_beside_a_limited_sidecar_is_bounded_by_it():
    # Go checks what runs while each init container runs: the sidecar's limits count
    candidate = pod(BURSTABLE, init=(sidecar("s", limits=cpu_mem("100m", "50Mi")), ctr("i")))
    assert pod_resource_config(candidate) == ResourceConfig(204, 30000, 100000, 250 * Mi)


def test_the_overhead_is_part_of_the_pod_cgroup():
    candidate = pod(GUARANTEED, overhead={"cpu": "250m", "memory": "120Mi"})
    assert pod_resource_config(candidate) == ResourceConfig(358, 35000, 100000, 220 * Mi)


@pytest.mark.parametrize("pids, expected", [(1024, 1024), (0, None), (-1, None)])
def test_the_pod_pids_limit_is_set_only_when_positive(pids, expected):
    assert pod_resource_config(pod(), pod_pids_limit=pids).pids_limit == expected


def test_pod_hugepages_are_bounded_by_the_requests():
    candidate = pod(ctr(requests=cpu_mem("100m"), limits={"hugepages-2Mi": "4Mi", "memory": "1Gi"}))
    assert pod_resource_config(candidate).hugepage_limits == {2 * Mi: 4 * Mi}


def test_burstable_tier_shares_come_from_the_summed_requests_not_the_summed_shares():
    pods = [pod(ctr(requests=cpu_mem("333m")), uid=str(i)) for i in range(3)] + [pod(GUARANTEED, uid="g")]
    assert qos_cgroup_cpu_shares(pods) == {"burstable": 1022, "besteffort": 2}  # not 3 * 340


def test_qos_tiers_without_pods_get_the_minimum_shares():
    assert qos_cgroup_cpu_shares([pod()]) == {"burstable": 2, "besteffort": 2}
