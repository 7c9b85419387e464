"""What eviction does to a pod, as the Go kubelet's eviction manager: the evicted pod's message,
condition and grace period, local-storage limits, and admission under node pressure."""

from __future__ import annotations

import msgspec
import pytest

from pykubelet.messages.pod import Pod, PodCondition
from pykubelet.pods.eviction import (
    CONTAINER_EPHEMERAL_STORAGE_LIMIT,
    EMPTY_DIR_LIMIT,
    POD_EPHEMERAL_STORAGE_LIMIT,
    admit_under_pressure,
    eviction_message,
    local_storage_eviction,
    threshold_eviction,
)
from pykubelet.pods.eviction_ranking import ContainerStorage, FsUsage, PodStorage
from pykubelet.pods.eviction_thresholds import Observation, Signal, parse_thresholds

MI, GI = 2**20, 2**30
MEMORY_100MI = parse_thresholds({"memory.available": "100Mi"}, {}, {}, {})
MEMORY_OBSERVED = {Signal.MEMORY_AVAILABLE: Observation(available=50 * MI, capacity=8 * GI)}


def pod(containers: list[dict] | None = None, **spec) -> Pod:
    body = {"containers": containers or [{"name": "app"}], **spec}
    return msgspec.convert({"metadata": {"name": "web", "namespace": "default", "uid": "u1"}, "spec": body}, Pod)


def container(name: str, requests: dict | None = None, limits: dict | None = None) -> dict:
    return {"name": name, "resources": {"requests": requests or {}, "limits": limits or {}}}


# --- the evicted pod's message ------------------------------------------------------------


def test_the_message_names_the_threshold_and_the_container_above_its_request():
    message, annotations = eviction_message("memory", pod(), MEMORY_100MI, MEMORY_OBSERVED, {"app": 1000 * MI})
    assert message == ("The node was low on resource: memory. Threshold quantity: 100Mi, available: 50Mi. "
                       "Container app was using 1000Mi, request is 0, has larger consumption of memory. ")  # fmt: skip
    assert annotations == {"offending_containers": "app", "offending_containers_usage": "1000Mi",
                           "starved_resource": "memory"}  # fmt: skip


def test_the_message_prints_quantities_as_go_does():
    subject = pod([container("p1", {"memory": "128M"}), container("quiet", {"memory": "1Gi"})])
    observed = {Signal.MEMORY_AVAILABLE: Observation(available=12536420 * 1024, capacity=16 * GI)}
    thresholds = parse_thresholds({"memory.available": "12Gi"}, {}, {}, {})
    message, annotations = eviction_message("memory", subject, thresholds, observed,
                                            {"p1": 788244 * 1024, "quiet": 10 * MI})  # fmt: skip
    assert message == (
        "The node was low on resource: memory. Threshold quantity: 12Gi, available: 12536420Ki. "
        "Container p1 was using 788244Ki, request is 128M, has larger consumption of memory. ")
    assert annotations["offending_containers"] == "p1"


def test_a_percentage_threshold_is_printed_as_its_share_of_capacity():
    thresholds = parse_thresholds({"nodefs.inodesFree": "5%"}, {}, {}, {})
    observed = {Signal.NODEFS_INODES_FREE: Observation(available=1000, capacity=1_000_000)}
    message, _ = eviction_message("inodes", pod(), thresholds, observed, {"app": 10})
    assert message == "The node was low on resource: inodes. Threshold quantity: 50000, available: 1k. "


def test_without_stats_the_message_stops_at_the_threshold_and_has_no_annotations():
    message, annotations = eviction_message("memory", pod(), MEMORY_100MI, MEMORY_OBSERVED, None)
    assert message == "The node was low on resource: memory. Threshold quantity: 100Mi, available: 50Mi. "
    assert annotations == {}


def test_ephemeral_storage_usage_is_compared_with_the_ephemeral_storage_request():
    subject = pod([container("app", {"ephemeral-storage": "1Gi"}), container("logger")])
    thresholds = parse_thresholds({"nodefs.available": "1Gi"}, {}, {}, {})
    observed = {Signal.NODEFS_AVAILABLE: Observation(available=512 * MI, capacity=100 * GI)}
    message, _ = eviction_message("ephemeral-storage", subject, thresholds, observed, {"app": GI, "logger": 2 * GI})
    assert message == ("The node was low on resource: ephemeral-storage. Threshold quantity: 1Gi, available: 512Mi. "
                       "Container logger was using 2Gi, request is 0, has larger consumption of ephemeral-storage. ")


@pytest.mark.parametrize("soft, grace_period", [pytest.param(False, 1, id="hard-at-once"),
                                                pytest.param(True, 30, id="soft-with-evictionMaxPodGracePeriod")])
def test_threshold_eviction(soft, grace_period):
    if soft:
        [threshold] = parse_thresholds({}, {"memory.available": "100Mi"}, {"memory.available": "1m"}, {})
    else:
        [threshold] = MEMORY_100MI
    eviction = threshold_eviction(pod(), threshold=threshold, thresholds=[threshold], observations=MEMORY_OBSERVED,
                                  container_usage={"app": 1000 * MI}, max_pod_grace_period=30)  # fmt: skip
    assert (eviction.reason, eviction.signal, eviction.grace_period_seconds) == ("Evicted", "memory.available",
                                                                                 grace_period)  # fmt: skip
    assert eviction.condition == PodCondition(type="DisruptionTarget", status="True", reason="TerminationByKubelet",
                                              message=eviction.message)  # fmt: skip
    assert eviction.message.startswith("The node was low on resource: memory. ")


# --- local storage ------------------------------------------------------------------------

SCRATCH = [{"name": "scratch", "emptyDir": {"sizeLimit": "100Mi"}}]


def storage(*, scratch: int = 0, total: int | None = None, logs: int = 0, rootfs: int = 0) -> PodStorage:
    return PodStorage(containers={"app": ContainerStorage(FsUsage(rootfs), FsUsage(logs))},
                      volumes={"scratch": FsUsage(scratch)}, ephemeral_storage=total)  # fmt: skip


@pytest.mark.parametrize(
    "subject, usage, dedicated, signal, message",
    [
        pytest.param(pod(volumes=SCRATCH), storage(scratch=101 * MI), False, EMPTY_DIR_LIMIT,
                     'Usage of EmptyDir volume "scratch" exceeds the limit "100Mi". ',
                     id="emptydir-over-its-size-limit"),
        pytest.param(pod([container("app", limits={"ephemeral-storage": "1Gi"}),
                          container("side", limits={"ephemeral-storage": "1Gi"})]),
                     storage(total=2 * GI + 1), False, POD_EPHEMERAL_STORAGE_LIMIT,
                     "Pod ephemeral local storage usage exceeds the total limit of containers 2Gi. ",
                     id="pod-over-the-sum-of-its-limits"),
        pytest.param(pod([container("app", limits={"ephemeral-storage": "1Gi"})]),
                     storage(total=GI, logs=GI - 10, rootfs=20), False, CONTAINER_EPHEMERAL_STORAGE_LIMIT,
                     'Container app exceeded its local ephemeral storage limit "1Gi". ',
                     id="container-logs-and-writable-layer-over-its-limit"),
        pytest.param(pod(volumes=SCRATCH, containers=[container("app", limits={"ephemeral-storage": "1Gi"})]),
                     storage(scratch=200 * MI, total=2 * GI), False, EMPTY_DIR_LIMIT,
                     'Usage of EmptyDir volume "scratch" exceeds the limit "100Mi". ', id="emptydir-is-checked-first"),
    ],
)
def test_local_storage_eviction(subject, usage, dedicated, signal, message):
    eviction = local_storage_eviction(subject, usage, dedicated_image_fs=dedicated)
    assert (eviction.signal, eviction.message, eviction.grace_period_seconds, eviction.condition) == (
        signal, message, 1, None)


@pytest.mark.parametrize(
    "subject, usage, dedicated",
    [
        pytest.param(pod(volumes=SCRATCH), storage(scratch=100 * MI), False, id="emptydir-at-its-limit"),
        pytest.param(pod(volumes=[{"name": "scratch", "emptyDir": {}}]), storage(scratch=100 * GI), False,
                     id="emptydir-without-a-limit"),
        pytest.param(pod([container("app", limits={"ephemeral-storage": "1Gi"})]),
                     storage(total=GI - 20, logs=GI - 10, rootfs=20), True,
                     id="writable-layer-on-a-separate-image-fs-is-not-the-containers"),
        pytest.param(pod(), storage(total=100 * GI, logs=100 * GI), False, id="no-limits-at-all"),
    ],
)
def test_no_local_storage_eviction(subject, usage, dedicated):
    assert local_storage_eviction(subject, usage, dedicated_image_fs=dedicated) is None


# --- admission under pressure -------------------------------------------------------------

BEST_EFFORT = pod()
BURSTABLE = pod([container("app", {"memory": "100Mi"})])


@pytest.mark.parametrize(
    "subject, conditions, admitted",
    [
        pytest.param(BEST_EFFORT, [], True, id="no-pressure"),
        pytest.param(BEST_EFFORT, ["MemoryPressure"], False, id="memory-pressure-refuses-best-effort"),
        pytest.param(BURSTABLE, ["MemoryPressure"], True, id="memory-pressure-admits-burstable"),
        pytest.param(pod(tolerations=[{"key": "node.kubernetes.io/memory-pressure", "operator": "Exists",
                                       "effect": "NoSchedule"}]), ["MemoryPressure"], True,
                     id="best-effort-tolerating-memory-pressure"),
        pytest.param(pod(tolerations=[{"operator": "Exists"}]), ["MemoryPressure"], True,
                     id="best-effort-tolerating-everything"),
        pytest.param(pod(tolerations=[{"key": "node.kubernetes.io/disk-pressure", "operator": "Exists",
                                       "effect": "NoSchedule"}]), ["MemoryPressure"], False,
                     id="best-effort-tolerating-only-disk-pressure"),
        pytest.param(pod(tolerations=[{"key": "node.kubernetes.io/memory-pressure", "operator": "Exists",
                                       "effect": "NoExecute"}]), ["MemoryPressure"], False,
                     id="best-effort-tolerating-another-effect"),
        pytest.param(BURSTABLE, ["DiskPressure"], False, id="disk-pressure-refuses-every-pod"),
        pytest.param(BURSTABLE, ["MemoryPressure", "PIDPressure"], False, id="more-than-memory-refuses-every-pod"),
        pytest.param(pod(priority=2_000_000_000), ["DiskPressure"], True, id="critical-pods-are-admitted"),
    ],
)
def test_admit_under_pressure(subject, conditions, admitted):
    assert admit_under_pressure(subject, conditions).ok is admitted


def test_a_refusal_names_the_conditions_as_go():
    assert tuple(admit_under_pressure(BEST_EFFORT, {"MemoryPressure"})) == (
        False, "Evicted", "The node had condition: [MemoryPressure]. ")
    assert admit_under_pressure(BURSTABLE, {"PIDPressure", "DiskPressure"}).message == (
        "The node had condition: [DiskPressure PIDPressure]. ")
