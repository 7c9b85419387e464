"""Ranking pods for eviction as the Go kubelet's helpers.go does (its TestOrderedBy* cases, run through
the full rank functions), and the critical pods evictPod refuses."""

from __future__ import annotations

from decimal import Decimal

import msgspec
import pytest

from pykubelet.messages.pod import Pod
from pykubelet.pods.eviction_ranking import (
    SYSTEM_CRITICAL_PRIORITY,
    ContainerStorage,
    DiskResource,
    FsStats,
    FsUsage,
    PodStorage,
    disk_ranking,
    is_critical_pod,
    pod_disk_usage,
    pod_request,
    pod_resource,
    pod_to_evict,
    rank_for_disk,
    rank_for_memory,
    rank_for_pids,
)
from pykubelet.pods.eviction_thresholds import Signal

MI = 2**20
LOW, DEFAULT, HIGH = -1, 0, 1  # Go's lowPriority, defaultPriority, highPriority
ALL_FS = frozenset({FsStats.ROOT, FsStats.LOGS, FsStats.LOCAL_VOLUME_SOURCE})


def pod(name: str, priority: int | None = DEFAULT, *, requests: dict | None = None, limits: dict | None = None,
        volumes: list | None = None, annotations: dict | None = None, **spec) -> Pod:  # fmt: skip
    container = {"name": name, "resources": {"requests": requests or {}, "limits": limits or {}}}
    body = {"containers": [container], "volumes": volumes or [], **spec}
    if priority is not None:
        body["priority"] = priority
    return msgspec.convert({"metadata": {"name": name, "uid": name, "annotations": annotations or {}}, "spec": body},
                           Pod)  # fmt: skip


def names(pods: list[Pod]) -> list[str]:
    return [p.metadata.name for p in pods]


# --- memory -------------------------------------------------------------------------------


def test_a_pod_exceeding_its_memory_request_goes_before_one_below_it():
    below = pod("below-requests", -1, requests={"memory": "200Mi"})
    exceeds = pod("exceeds-requests", 1, requests={"memory": "100Mi"})
    usage = {"below-requests": 199 * MI, "exceeds-requests": 101 * MI}
    assert names(rank_for_memory([below, exceeds], usage)) == ["exceeds-requests", "below-requests"]


def test_memory_ranks_by_usage_above_request_among_equal_priorities():
    pods = [pod("best-effort-high"), pod("best-effort-low"),
            pod("burstable-high", requests={"memory": "100Mi"}, limits={"memory": "1Gi"}),
            pod("burstable-low", requests={"memory": "100Mi"}, limits={"memory": "1Gi"}),
            pod("guaranteed-high", requests={"memory": "1Gi"}, limits={"memory": "1Gi"}),
            pod("guaranteed-low", requests={"memory": "1Gi"}, limits={"memory": "1Gi"})]  # fmt: skip
    usage = {"best-effort-high": 500 * MI, "best-effort-low": 300 * MI, "burstable-high": 800 * MI,
             "burstable-low": 300 * MI, "guaranteed-high": 800 * MI, "guaranteed-low": 200 * MI}  # fmt: skip
    assert names(rank_for_memory(pods, usage)) == ["burstable-high", "best-effort-high", "best-effort-low",
                                                   "burstable-low", "guaranteed-high", "guaranteed-low"]  # fmt: skip


def test_memory_ranks_exceeding_then_priority_then_usage_as_gos_ordered_by_priority_memory():
    pods = [pod("above-requests-low-priority-high-usage", LOW), pod("above-requests-low-priority-low-usage", LOW),
            pod("above-requests-high-priority-high-usage", HIGH, requests={"memory": "100Mi"}),
            pod("above-requests-high-priority-low-usage", HIGH, requests={"memory": "100Mi"}),
            pod("below-requests-low-priority-high-usage", LOW, requests={"memory": "1Gi"}),
            pod("below-requests-low-priority-low-usage", LOW, requests={"memory": "1Gi"}),
            pod("below-requests-high-priority-high-usage", HIGH, requests={"memory": "1Gi"}),
            pod("below-requests-high-priority-low-usage", HIGH, requests={"memory": "1Gi"})]  # fmt: skip
    usage = dict(zip([p.metadata.uid for p in pods], [500 * MI, 50 * MI, 600 * MI, 150 * MI, 800 * MI, 200 * MI,
                                                       800 * MI, 200 * MI]))  # fmt: skip
    assert names(rank_for_memory(list(reversed(pods)), usage)) == names(pods)


def test_a_pod_without_stats_is_ranked_first():
    measured, unmeasured = pod("measured"), pod("unmeasured", HIGH, requests={"memory": "1Gi"})
    assert names(rank_for_memory([measured, unmeasured], {"measured": 900 * MI})) == ["unmeasured", "measured"]


def test_a_pod_without_priority_ranks_as_priority_zero():
    assert names(rank_for_memory([pod("zero", None), pod("low", LOW)], {"zero": MI, "low": MI})) == ["low", "zero"]


# --- PIDs ---------------------------------------------------------------------------------


def test_pids_rank_by_priority_then_process_count():
    pods = [pod("low-priority-high-usage", LOW), pod("low-priority-low-usage", LOW),
            pod("high-priority-high-usage", HIGH), pod("high-priority-low-usage", HIGH)]  # fmt: skip
    counts = {"low-priority-high-usage": 20, "low-priority-low-usage": 6,
              "high-priority-high-usage": 20, "high-priority-low-usage": 5}  # fmt: skip
    assert names(rank_for_pids(list(reversed(pods)), counts)) == names(pods)


# --- disk ---------------------------------------------------------------------------------

EMPTY_DIR = [{"name": "local-volume", "emptyDir": {}}]


def disk(pod_: Pod, rootfs: int, logs: int, volume: int, *, inodes: bool = False) -> PodStorage:
    """Go's newPodDiskStats/newPodInodeStats: each container and each volume using the given amounts."""
    use = (lambda n: FsUsage(inodes=n)) if inodes else (lambda n: FsUsage(bytes=n * MI))
    return PodStorage(containers={c.name: ContainerStorage(use(rootfs), use(logs)) for c in pod_.spec.containers},
                      volumes={v.name: use(volume) for v in pod_.spec.volumes})  # fmt: skip


def test_disk_ranks_by_usage_above_the_ephemeral_storage_request():
    request = {"ephemeral-storage": "100Mi"}
    pods = [pod("best-effort-high", volumes=EMPTY_DIR), pod("best-effort-low", volumes=EMPTY_DIR),
            pod("burstable-high", requests=request, limits={"ephemeral-storage": "400Mi"}, volumes=EMPTY_DIR),
            pod("burstable-low", requests=request, limits={"ephemeral-storage": "400Mi"}, volumes=EMPTY_DIR),
            pod("guaranteed-high", requests={"ephemeral-storage": "400Mi"}, limits={"ephemeral-storage": "400Mi"},
                volumes=EMPTY_DIR),
            pod("guaranteed-low", requests={"ephemeral-storage": "400Mi"}, limits={"ephemeral-storage": "400Mi"},
                volumes=EMPTY_DIR)]  # fmt: skip
    amounts = [(50, 100, 150), (25, 25, 50), (150, 150, 50), (25, 35, 50), (225, 100, 50), (25, 45, 50)]
    usage = {p.metadata.uid: disk(p, *a) for p, a in zip(pods, amounts)}
    assert names(rank_for_disk(pods, usage, measure=ALL_FS)) == [
        "best-effort-high", "burstable-high", "best-effort-low", "burstable-low", "guaranteed-high", "guaranteed-low"]


def test_disk_ranks_exceeding_then_priority_then_usage_as_gos_ordered_by_priority_disk():
    def disk_pod(name: str, priority: int, request: str | None = None) -> Pod:
        return pod(name, priority, requests={"ephemeral-storage": request} if request else None, volumes=EMPTY_DIR)

    pods = [disk_pod("above-requests-low-priority-high-usage", LOW),
            disk_pod("above-requests-low-priority-low-usage", LOW),
            disk_pod("above-requests-high-priority-high-usage", HIGH, "100Mi"),
            disk_pod("above-requests-high-priority-low-usage", HIGH, "100Mi"),
            disk_pod("below-requests-low-priority-high-usage", LOW, "1Gi"),
            disk_pod("below-requests-low-priority-low-usage", LOW, "1Gi"),
            disk_pod("below-requests-high-priority-high-usage", HIGH, "1Gi"),
            disk_pod("below-requests-high-priority-low-usage", HIGH, "1Gi")]  # fmt: skip
    amounts = [(200, 100, 200), (10, 10, 30), (200, 150, 250), (90, 50, 10), (500, 200, 100), (50, 100, 50),
               (250, 500, 50), (100, 60, 40)]  # fmt: skip
    usage = {p.metadata.uid: disk(p, *a) for p, a in zip(pods, amounts)}
    assert names(rank_for_disk(list(reversed(pods)), usage, measure=ALL_FS)) == names(pods)


def test_inodes_rank_by_priority_then_inodes_used():
    pods = [pod(name, priority, volumes=EMPTY_DIR) for name, priority in (
        ("low-priority-high-usage", LOW), ("low-priority-low-usage", LOW),
        ("high-priority-high-usage", HIGH), ("high-priority-low-usage", HIGH))]  # fmt: skip
    amounts = [(50000, 100000, 250000), (60000, 30000, 10000), (150000, 150000, 50000), (10000, 40000, 100000)]
    usage = {p.metadata.uid: disk(p, *a, inodes=True) for p, a in zip(pods, amounts)}
    ranked = rank_for_disk(list(reversed(pods)), usage, measure=ALL_FS, resource=DiskResource.INODES)
    assert names(ranked) == names(pods)


def test_pod_disk_usage_counts_only_local_volumes_and_what_is_measured():
    volumes = [{"name": "scratch", "emptyDir": {}}, {"name": "tmpfs", "emptyDir": {"medium": "Memory"}},
               {"name": "host", "hostPath": {"path": "/data"}}, {"name": "cm", "configMap": {"name": "c"}},
               {"name": "token", "secret": {"secretName": "s"}}]  # fmt: skip
    subject = pod("p", volumes=volumes)
    storage = PodStorage(containers={"p": ContainerStorage(FsUsage(1), FsUsage(10))},
                         volumes={v["name"]: FsUsage(100 * 10**i) for i, v in enumerate(volumes)})  # fmt: skip
    assert pod_disk_usage(subject, storage, ALL_FS).bytes == 1 + 10 + 100 + 10_000 + 100_000
    assert pod_disk_usage(subject, storage, {FsStats.LOGS}).bytes == 10
    assert pod_disk_usage(subject, PodStorage(containers={"p": ContainerStorage()}), ALL_FS) == FsUsage()


@pytest.mark.parametrize(
    "signal, dedicated, split, measure, resource",
    [
        pytest.param(Signal.NODEFS_AVAILABLE, False, False, {FsStats.IMAGES, FsStats.ROOT, FsStats.LOGS,
                     FsStats.LOCAL_VOLUME_SOURCE}, DiskResource.EPHEMERAL_STORAGE, id="one-fs-counts-everything"),
        pytest.param(Signal.NODEFS_INODES_FREE, True, False, {FsStats.LOGS, FsStats.LOCAL_VOLUME_SOURCE},
                     DiskResource.INODES, id="imagefs-apart-nodefs-counts-logs-and-volumes"),
        pytest.param(Signal.IMAGEFS_AVAILABLE, True, False, {FsStats.ROOT, FsStats.IMAGES},
                     DiskResource.EPHEMERAL_STORAGE, id="imagefs-apart-imagefs-counts-writable-layers"),
        pytest.param(Signal.CONTAINERFS_AVAILABLE, True, False, {FsStats.ROOT, FsStats.IMAGES},
                     DiskResource.EPHEMERAL_STORAGE, id="imagefs-apart-containerfs-as-imagefs"),
        pytest.param(Signal.CONTAINERFS_INODES_FREE, True, True, {FsStats.LOGS, FsStats.LOCAL_VOLUME_SOURCE,
                     FsStats.ROOT}, DiskResource.INODES, id="split-containerfs-as-nodefs"),
        pytest.param(Signal.IMAGEFS_AVAILABLE, True, True, {FsStats.IMAGES}, DiskResource.EPHEMERAL_STORAGE,
                     id="split-imagefs-counts-nothing-of-pods"),
    ],
)
def test_disk_ranking_measures_what_lives_on_the_filesystem_under_pressure(signal, dedicated, split, measure, resource):
    assert disk_ranking(signal, dedicated_image_fs=dedicated, split_container_image_fs=split) == (measure, resource)


# --- requests -----------------------------------------------------------------------------


def test_pod_request_counts_sidecars_init_containers_and_overhead_as_go():
    subject = pod("app", requests={"memory": "100Mi"}, overhead={"memory": "10Mi"}, initContainers=[
        {"name": "sidecar", "restartPolicy": "Always", "resources": {"requests": {"memory": "50Mi"}}},
        {"name": "migrate", "resources": {"requests": {"memory": "300Mi"}}}])  # fmt: skip
    # max(100 + 50, 300 + 50) + overhead
    assert pod_request(subject, "memory") == 360 * MI
    assert pod_request(pod("none", overhead={"memory": "10Mi"}), "memory") == 0  # overhead only on a request
    assert pod_resource(pod("none"), "limits", "ephemeral-storage") is None


def test_a_summed_quantity_keeps_the_first_format_as_go():
    subject = pod("app", limits={"ephemeral-storage": "1G"}, initContainers=[
        {"name": "side", "restartPolicy": "Always", "resources": {"limits": {"ephemeral-storage": "1Gi"}}}])
    total = pod_resource(subject, "limits", "ephemeral-storage")
    assert total.value == Decimal(10**9 + 2**30) and str(total) == "2073741824"


# --- critical pods ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "subject, critical",
    [
        pytest.param(pod("api"), False, id="an-api-pod"),
        pytest.param(pod("static", annotations={"kubernetes.io/config.source": "file"}), True, id="static"),
        pytest.param(pod("mirror", annotations={"kubernetes.io/config.mirror": "abc"}), True, id="mirror"),
        pytest.param(pod("system", SYSTEM_CRITICAL_PRIORITY), True, id="system-critical-priority"),
        pytest.param(pod("almost", SYSTEM_CRITICAL_PRIORITY - 1), False, id="below-system-critical-priority"),
    ],
)
def test_is_critical_pod(subject, critical):
    assert is_critical_pod(subject) is critical


def test_the_first_ranked_pod_that_is_not_critical_is_evicted():
    static = pod("static", annotations={"kubernetes.io/config.source": "file"})
    assert names([pod_to_evict([static, pod("web"), pod("db")])]) == ["web"]
    assert pod_to_evict([static, pod("system", SYSTEM_CRITICAL_PRIORITY)]) is None
