"""The eviction manager actor on MockClock with a fake node reader (its reads run inline): which pod
it evicts and when, the pressure conditions and their transition period, node-level reclaim before
eviction, soft thresholds, minimum reclaim, local storage limits, a broken reader, the wait for an
evicted pod, and its metrics."""

from __future__ import annotations

import logging

import msgspec
import pytest
import trio
from cri_api.v1 import api_pb2
from prometheus_client import CollectorRegistry

from pykubelet.actors.eviction_manager import EvictionSettings, eviction_manager_actor
from pykubelet.actors.node_pressure import NodePressure
from pykubelet.actors.runtime_link import RuntimeHandle
from pykubelet.messages.pod import Pod
from pykubelet.messages.pod_updates import EvictPod
from pykubelet.pods.eviction_ranking import SYSTEM_CRITICAL_PRIORITY, ContainerStorage, FsUsage, PodStorage
from pykubelet.pods.eviction_thresholds import (
    DISK_PRESSURE,
    MEMORY_PRESSURE,
    PID_PRESSURE,
    NodeReclaim,
    Observation,
    Quantity,
    Signal,
    Threshold,
    ThresholdValue,
)
from pykubelet.pods.labels import CONTAINER_NAME_LABEL, POD_UID_LABEL
from pykubelet.pods.manifest import CONFIG_SOURCE
from pykubelet.ports.cri import RuntimeVersion
from pykubelet.ports.node_signals import NodeSignalReader, PodUsage
from pykubelet.ports.node_stats import CgroupMounts
from pykubelet.supervisor import ChildSpec
from tests.support.actors import Inbox, running

MiB, GiB = 1 << 20, 1 << 30


def hard(signal: Signal, quantity: str, *, min_reclaim: str | None = None, grace: float = 0.0) -> Threshold:
    reclaim = ThresholdValue(quantity=Quantity.parse(min_reclaim)) if min_reclaim else None
    return Threshold(signal, ThresholdValue(quantity=Quantity.parse(quantity)), grace_period=grace, min_reclaim=reclaim)


def percent(signal: Signal, value: float) -> Threshold:
    return Threshold(signal, ThresholdValue(percentage=value))


def pod(name: str, *, memory: str | None = None, priority: int = 0, static: bool = False, volumes=None,
        ephemeral_limit: str | None = None) -> Pod:  # fmt: skip
    resources: dict = {}
    if memory:
        resources = {"requests": {"memory": memory, "cpu": "1"}, "limits": {"memory": memory, "cpu": "1"}}
    if ephemeral_limit:
        resources.setdefault("limits", {})["ephemeral-storage"] = ephemeral_limit
    return msgspec.convert({
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}",
                     "annotations": {CONFIG_SOURCE: "file"} if static else {}},
        "spec": {"containers": [{"name": "app", "resources": resources}], "priority": priority,
                 "volumes": volumes or []},
    }, Pod)  # fmt: skip


class FakeNode(NodeSignalReader):
    """The node's signals as the test sets them (available, capacity); `broken` groups raise."""

    def __init__(self) -> None:
        super().__init__(root_dir="/nonexistent", pod_logs_dir="/nonexistent", cgroup_mounts=CgroupMounts())
        self.values: dict[Signal, tuple[int, int]] = {
            Signal.MEMORY_AVAILABLE: (6 * GiB, 8 * GiB),
            Signal.NODEFS_AVAILABLE: (50 * GiB, 100 * GiB),
            Signal.PID_AVAILABLE: (30000, 32768),
        }
        self.broken: set[str] = set()
        self.memory: dict[str, int] = {}
        self.processes: dict[str, int] = {}
        self.storage: dict[str, PodStorage] = {}
        self.observed_at: list[float] = []

    def set(self, signal: Signal, available: int) -> None:
        self.values[signal] = (available, self.values[signal][1])

    def _read(self, group: str, now: float, *signals: Signal) -> dict[Signal, Observation]:
        if group in self.broken:
            raise OSError(f"{group} is broken")
        return {s: Observation(*self.values[s], now) for s in signals if s in self.values}

    def memory_available(self, now):
        self.observed_at.append(now)
        return self._read("memory", now, Signal.MEMORY_AVAILABLE)

    def allocatable_memory_available(self, now):
        return {}

    def filesystems(self, image_fs, now):
        return self._read("filesystems", now, Signal.NODEFS_AVAILABLE)

    def pid_available(self, now):
        return self._read("pids", now, Signal.PID_AVAILABLE)

    def dedicated_image_fs(self, image_fs):
        return False

    def pods_usage(self, pods, *, cgroups=None, memory=False, processes=False, storage=(), layers=None, budget=None):
        return {p.metadata.uid: PodUsage(
            memory_working_set=self.memory.get(p.metadata.uid) if memory else None,
            processes=self.processes.get(p.metadata.uid) if processes else None,
            storage=self.storage.get(p.metadata.uid) if p.metadata.uid in storage else None,
        ) for p in pods}  # fmt: skip


async def inline(fn):
    return fn()


class Harness:
    def __init__(self, settings: EvictionSettings, pods: list[Pod], *, runtime: RuntimeHandle | None = None) -> None:
        self.node = FakeNode()
        self.pods = list(pods)
        self.pressure = NodePressure()
        self.registry = CollectorRegistry()
        self.inbox = Inbox()
        self.reclaimed: list[tuple[NodeReclaim, float]] = []
        self.on_reclaim = lambda action: None
        self.spec = ChildSpec("eviction-manager", eviction_manager_actor(
            settings, pressure=self.pressure, runtime=runtime or RuntimeHandle("unix:///fake.sock"),
            active_pods=lambda: list(self.pods), pod_cgroup=lambda p: f"/kubepods/pod{p.metadata.uid}",
            cgroups=None, reclaim=self.reclaim, metrics=self.registry, signals=self.node, run_sync=inline,
        ))

    async def reclaim(self, action: NodeReclaim) -> None:
        self.reclaimed.append((action, trio.current_time()))
        self.on_reclaim(action)

    def running(self):
        return running(self.inbox.spec("sync-loop"), self.spec)

    def evictions(self) -> list[tuple[str, float]]:
        return [(m.pod_uid, t) for m, t in zip(self.inbox.messages, self.inbox.times) if isinstance(m, EvictPod)]

    def gone(self, uid: str) -> None:
        self.pods = [p for p in self.pods if p.metadata.uid != uid]

    def metric(self, name: str, **labels) -> float:
        return self.registry.get_sample_value(name, labels) or 0.0


BEST_EFFORT, GUARANTEED, STATIC = pod("besteffort"), pod("guaranteed", memory="1Gi"), pod("static", static=True)
MEMORY_HARD = EvictionSettings(thresholds=[hard(Signal.MEMORY_AVAILABLE, "1Gi")])


def memory_node(h: Harness) -> None:
    h.node.memory.update({"uid-besteffort": 100 * MiB, "uid-guaranteed": 900 * MiB, "uid-static": 2 * GiB})


# -- memory ----------------------------------------------------------------------------------


async def test_a_memory_threshold_crossed_evicts_the_best_effort_pod_once_within_a_period(autojump_clock, caplog):
    h = Harness(MEMORY_HARD, [GUARANTEED, STATIC, BEST_EFFORT])
    memory_node(h)
    caplog.set_level(logging.WARNING, logger="pykubelet.eviction")
    async with h.running():
        await trio.sleep(15)
        assert h.evictions() == [] and h.pressure.conditions == frozenset()
        h.node.set(Signal.MEMORY_AVAILABLE, 500 * MiB)
        await trio.sleep(10)  # the pass at t=20 sees it
        assert h.evictions() == [("uid-besteffort", 20.0)]
        evict = h.inbox.messages[0]
        assert evict == EvictPod(
            pod_uid="uid-besteffort", reason="Evicted", grace_period_seconds=1, disruption_target=True,
            message="The node was low on resource: memory. Threshold quantity: 1Gi, available: 500Mi. ",
        )
        assert h.pressure.conditions == {MEMORY_PRESSURE} and h.pressure.memory_pressure
        said = [r for r in caplog.records if "evicting pod" in r.getMessage()]
        assert [r.getMessage() for r in said] == [
            "eviction manager: evicting pod default/besteffort (memory.available): "
            "available 500Mi, threshold 1Gi (hard)"]
        assert (said[0].pod, said[0].pod_uid) == ("default/besteffort", "uid-besteffort")

        await trio.sleep(10)  # waiting for the pod to be cleaned up: nothing more
        assert len(h.evictions()) == 1
        h.gone("uid-besteffort")
        h.node.set(Signal.MEMORY_AVAILABLE, 2 * GiB)
        await trio.sleep(60)
        assert len(h.evictions()) == 1
        assert h.metric("kubelet_evictions_total", eviction_signal="memory.available") == 1
        assert h.metric("kubelet_eviction_stats_age_seconds_count", eviction_signal="memory.available") == 1


async def test_an_evicted_pod_still_active_after_the_cleanup_timeout_is_synchronized_again(autojump_clock):
    h = Harness(MEMORY_HARD, [BEST_EFFORT])
    h.node.set(Signal.MEMORY_AVAILABLE, 500 * MiB)
    async with h.running():
        await trio.sleep(45)
        # Go's podCleanupTimeout: 30 s of waiting, then the next synchronize at once.
        assert h.evictions() == [("uid-besteffort", 0.0), ("uid-besteffort", 30.0)]


async def test_the_next_pod_goes_as_soon_as_the_evicted_one_is_cleaned_up(autojump_clock):
    h = Harness(MEMORY_HARD, [GUARANTEED, STATIC, BEST_EFFORT])
    memory_node(h)
    h.node.set(Signal.MEMORY_AVAILABLE, 500 * MiB)
    async with h.running():
        await trio.sleep(2.5)
        h.gone("uid-besteffort")  # seen at the poll at t=3
        await trio.sleep(1)
        assert h.evictions() == [("uid-besteffort", 0.0), ("uid-guaranteed", 3.0)]


async def test_conditions_are_set_at_once_and_cleared_only_after_the_transition_period(autojump_clock):
    h = Harness(MEMORY_HARD, [])
    h.node.set(Signal.MEMORY_AVAILABLE, 500 * MiB)
    async with h.running():
        await trio.sleep(0.5)
        assert h.pressure.conditions == {MEMORY_PRESSURE} and h.pressure.updated_at == 0.0
        assert [t.signal for t in h.pressure.thresholds_met] == [Signal.MEMORY_AVAILABLE]
        assert h.pressure.observations[Signal.MEMORY_AVAILABLE].available == 500 * MiB
        await trio.sleep(20)  # t=20.5: last seen under pressure at t=20
        h.node.set(Signal.MEMORY_AVAILABLE, 2 * GiB)
        await trio.sleep(299)  # t=319.5: the pass at t=310 is 290 s after
        assert h.pressure.conditions == {MEMORY_PRESSURE} and h.pressure.thresholds_met == ()
        await trio.sleep(1)  # the pass at t=320 is 300 s after
        assert h.pressure.conditions == frozenset()
        assert h.evictions() == []  # no pod to evict


async def test_a_restarted_manager_keeps_the_conditions_for_their_transition_period(autojump_clock):
    h = Harness(MEMORY_HARD, [])
    h.node.set(Signal.MEMORY_AVAILABLE, 500 * MiB)
    async with h.running():
        await trio.sleep(5)  # under pressure at t=0
    h.node.set(Signal.MEMORY_AVAILABLE, 2 * GiB)
    again = Harness(MEMORY_HARD, [])
    again.node, again.pressure = h.node, h.pressure
    again.spec = ChildSpec("eviction-manager", eviction_manager_actor(
        MEMORY_HARD, pressure=h.pressure, runtime=RuntimeHandle("unix:///fake.sock"), active_pods=list,
        pod_cgroup=lambda p: None, cgroups=None, reclaim=again.reclaim, metrics=CollectorRegistry(),
        signals=h.node, run_sync=inline,
    ))
    async with again.running():
        await trio.sleep(299.5)  # t=304.5: passes at 5, 15, ... 295; seen last by the first one at t=0
        assert h.pressure.conditions == {MEMORY_PRESSURE}
        await trio.sleep(1)  # the pass at t=305
        assert h.pressure.conditions == frozenset()


async def test_a_critical_only_node_evicts_nothing(autojump_clock, caplog):
    critical = pod("dns", priority=SYSTEM_CRITICAL_PRIORITY)
    h = Harness(MEMORY_HARD, [STATIC, critical])
    h.node.set(Signal.MEMORY_AVAILABLE, 100 * MiB)
    with caplog.at_level(logging.WARNING, logger="pykubelet.eviction"):
        async with h.running() as tree:
            await trio.sleep(61)
            assert h.evictions() == [] and h.pressure.conditions == {MEMORY_PRESSURE}
            assert tree.snapshot().children[1].restarts == 0
    said = [r for r in caplog.records if "unable to evict any pods" in r.getMessage()]
    assert len(said) == 1  # seven passes, one warning


async def test_min_reclaim_keeps_a_threshold_met_until_that_much_more_is_free(autojump_clock):
    settings = EvictionSettings(thresholds=[hard(Signal.MEMORY_AVAILABLE, "1Gi", min_reclaim="500Mi")])
    h = Harness(settings, [GUARANTEED, STATIC, BEST_EFFORT])
    memory_node(h)
    h.node.set(Signal.MEMORY_AVAILABLE, 800 * MiB)
    async with h.running():
        await trio.sleep(0.5)
        h.gone("uid-besteffort")
        h.node.set(Signal.MEMORY_AVAILABLE, 1200 * MiB)  # above 1Gi, below 1Gi + 500Mi
        await trio.sleep(1)
        assert h.evictions() == [("uid-besteffort", 0.0), ("uid-guaranteed", 1.0)]
        h.gone("uid-guaranteed")
        h.node.set(Signal.MEMORY_AVAILABLE, 1600 * MiB)
        await trio.sleep(30)
        assert len(h.evictions()) == 2 and h.pressure.thresholds_met == ()


# -- soft thresholds -------------------------------------------------------------------------


async def test_a_soft_threshold_evicts_only_after_its_grace_period_with_the_max_pod_grace_period(autojump_clock):
    settings = EvictionSettings(thresholds=[hard(Signal.MEMORY_AVAILABLE, "1Gi", grace=60.0)], max_pod_grace_period=30)
    h = Harness(settings, [GUARANTEED, BEST_EFFORT])
    memory_node(h)
    h.node.set(Signal.MEMORY_AVAILABLE, 500 * MiB)
    async with h.running():
        await trio.sleep(0.5)
        assert h.pressure.conditions == {MEMORY_PRESSURE}  # the condition does not wait
        assert h.pressure.thresholds_met == ()
        await trio.sleep(59)
        assert h.evictions() == []
        await trio.sleep(1)
        assert h.evictions() == [("uid-besteffort", 60.0)]
        assert h.inbox.messages[0].grace_period_seconds == 30


async def test_a_soft_threshold_that_clears_within_its_grace_period_starts_over(autojump_clock):
    settings = EvictionSettings(thresholds=[hard(Signal.MEMORY_AVAILABLE, "1Gi", grace=60.0)])
    h = Harness(settings, [BEST_EFFORT])
    h.node.set(Signal.MEMORY_AVAILABLE, 500 * MiB)
    async with h.running():
        await trio.sleep(45)
        h.node.set(Signal.MEMORY_AVAILABLE, 2 * GiB)  # relieved at the pass at t=50
        await trio.sleep(10)
        h.node.set(Signal.MEMORY_AVAILABLE, 500 * MiB)  # met again from the pass at t=60
        await trio.sleep(64)  # t=119
        assert h.evictions() == []
        await trio.sleep(2)
        assert h.evictions() == [("uid-besteffort", 120.0)]


# -- disk and node-level reclaim -------------------------------------------------------------

DISK = EvictionSettings(thresholds=[percent(Signal.NODEFS_AVAILABLE, 0.1)])


def disk_pods(h: Harness) -> None:
    small, big = pod("small"), pod("big")
    h.pods = [small, big]
    h.node.storage = {
        "uid-small": PodStorage(containers={"app": ContainerStorage(rootfs=FsUsage(1 * GiB, 10))}),
        "uid-big": PodStorage(containers={"app": ContainerStorage(rootfs=FsUsage(5 * GiB, 10),
                                                                  logs=FsUsage(1 * GiB, 2))}),
    }  # fmt: skip


async def test_disk_pressure_runs_node_reclaim_first_and_evicts_nothing_when_it_relieved_it(autojump_clock):
    h = Harness(DISK, [])
    disk_pods(h)
    h.node.set(Signal.NODEFS_AVAILABLE, 5 * GiB)

    def freed(action: NodeReclaim) -> None:
        if action == NodeReclaim.DELETE_UNUSED_IMAGES:
            h.node.set(Signal.NODEFS_AVAILABLE, 40 * GiB)

    h.on_reclaim = freed
    async with h.running():
        await trio.sleep(30)
        assert h.reclaimed == [(NodeReclaim.DELETE_ALL_UNUSED_CONTAINERS, 0.0), (NodeReclaim.DELETE_UNUSED_IMAGES, 0.0)]
        assert h.evictions() == []
        assert h.pressure.conditions == {DISK_PRESSURE}  # seen met: held for the transition period


async def test_disk_pressure_that_reclaim_does_not_relieve_evicts_the_greediest_pod(autojump_clock):
    h = Harness(DISK, [])
    disk_pods(h)
    h.node.set(Signal.NODEFS_AVAILABLE, 5 * GiB)
    async with h.running():
        await trio.sleep(1)
        assert [a for a, _ in h.reclaimed] == [NodeReclaim.DELETE_ALL_UNUSED_CONTAINERS,
                                               NodeReclaim.DELETE_UNUSED_IMAGES]  # fmt: skip
        assert h.evictions() == [("uid-big", 0.0)]
        evict = h.inbox.messages[0]
        # 10% of 100Gi through Go's float32 percentage, printed as Go prints it.
        assert evict.message == ("The node was low on resource: ephemeral-storage. Threshold quantity: 10737418400, "
                                 "available: 5Gi. Container app was using 6Gi, request is 0, has larger "
                                 "consumption of ephemeral-storage. ")  # fmt: skip
        assert evict.annotations == {"offending_containers": "app", "offending_containers_usage": "6Gi",
                                     "starved_resource": "ephemeral-storage"}  # fmt: skip


async def test_a_failing_reclaim_does_not_stop_the_eviction(autojump_clock, caplog):
    h = Harness(DISK, [])
    disk_pods(h)
    h.node.set(Signal.NODEFS_AVAILABLE, 5 * GiB)

    def fail(action: NodeReclaim) -> None:
        raise RuntimeError("image service down")

    h.on_reclaim = fail
    with caplog.at_level(logging.WARNING, logger="pykubelet.eviction"):
        async with h.running():
            await trio.sleep(1)
            assert h.evictions() == [("uid-big", 0.0)]
    assert any("image service down" in r.getMessage() for r in caplog.records)


# -- pids ------------------------------------------------------------------------------------


async def test_pid_pressure_evicts_the_pod_with_the_most_tasks(autojump_clock):
    h = Harness(EvictionSettings(thresholds=[hard(Signal.PID_AVAILABLE, "1000")]), [pod("few"), pod("many")])
    h.node.processes = {"uid-few": 10, "uid-many": 5000}
    h.node.set(Signal.PID_AVAILABLE, 500)
    async with h.running():
        await trio.sleep(1)
        assert h.evictions() == [("uid-many", 0.0)] and h.pressure.conditions == {PID_PRESSURE}
        assert "Threshold quantity: 1k, available: 500. " in h.inbox.messages[0].message


# -- a broken reader -------------------------------------------------------------------------


async def test_a_reader_that_raises_for_one_signal_does_not_stop_the_others(autojump_clock):
    settings = EvictionSettings(thresholds=[hard(Signal.MEMORY_AVAILABLE, "1Gi"), hard(Signal.PID_AVAILABLE, "1000")])
    h = Harness(settings, [pod("many")])
    h.node.broken = {"memory"}
    h.node.processes = {"uid-many": 5000}
    h.node.set(Signal.PID_AVAILABLE, 500)
    async with h.running() as tree:
        await trio.sleep(1)
        assert h.pressure.conditions == {PID_PRESSURE}
        assert Signal.MEMORY_AVAILABLE not in h.pressure.observations
        assert h.evictions() == [("uid-many", 0.0)]
        assert tree.snapshot().children[1].restarts == 0


# -- local storage limits --------------------------------------------------------------------


async def test_an_empty_dir_over_its_size_limit_evicts_its_pod_without_any_threshold(autojump_clock):
    settings = EvictionSettings(thresholds=[])
    limited = pod("cache", volumes=[{"name": "scratch", "emptyDir": {"sizeLimit": "10Mi"}}])
    fine = pod("fine", ephemeral_limit="1Gi")
    static = pod("static-cache", static=True, volumes=[{"name": "scratch", "emptyDir": {"sizeLimit": "1Mi"}}])
    h = Harness(settings, [fine, limited, static])
    h.node.storage = {
        "uid-cache": PodStorage(volumes={"scratch": FsUsage(20 * MiB, 3)}, ephemeral_storage=20 * MiB),
        "uid-fine": PodStorage(ephemeral_storage=10 * MiB),
        "uid-static-cache": PodStorage(volumes={"scratch": FsUsage(20 * MiB, 3)}, ephemeral_storage=20 * MiB),
    }
    async with h.running():
        await trio.sleep(1)
        assert h.evictions() == [("uid-cache", 0.0)]
        assert h.inbox.messages[0] == EvictPod(
            pod_uid="uid-cache", reason="Evicted", grace_period_seconds=1, disruption_target=False,
            message='Usage of EmptyDir volume "scratch" exceeds the limit "10Mi". ',
        )
        assert h.metric("kubelet_evictions_total", eviction_signal="emptydirfs.limit") == 1
        assert h.pressure.conditions == frozenset()


async def test_without_local_storage_capacity_isolation_limits_are_not_enforced(autojump_clock):
    settings = EvictionSettings(thresholds=[], local_storage_capacity_isolation=False)
    limited = pod("cache", ephemeral_limit="1Mi")
    h = Harness(settings, [limited])
    h.node.storage = {"uid-cache": PodStorage(ephemeral_storage=20 * MiB)}
    async with h.running():
        await trio.sleep(30)
        assert h.evictions() == [] and h.node.observed_at == []  # nothing to do: nothing read


# -- with a runtime --------------------------------------------------------------------------


class FakeCri:
    endpoint = "unix:///fake.sock"

    async def image_fs_info(self):
        return api_pb2.ImageFsInfoResponse(image_filesystems=[
            api_pb2.FilesystemUsage(fs_id=api_pb2.FilesystemIdentifier(mountpoint="/var/lib/containerd"))])

    async def list_container_stats(self, filter=None):
        def stats(uid: str, attempt: int, working_set: int) -> api_pb2.ContainerStats:
            return api_pb2.ContainerStats(
                attributes=api_pb2.ContainerAttributes(
                    id=f"{uid}-{attempt}", metadata=api_pb2.ContainerMetadata(name="app", attempt=attempt),
                    labels={POD_UID_LABEL: uid, CONTAINER_NAME_LABEL: "app"}),
                memory=api_pb2.MemoryUsage(working_set_bytes=api_pb2.UInt64Value(value=working_set)),
            )

        return [stats("uid-besteffort", 0, 50 * MiB), stats("uid-besteffort", 1, 100 * MiB)]


async def test_the_eviction_message_names_the_containers_over_their_request_from_cri_stats(autojump_clock):
    runtime = RuntimeHandle(FakeCri.endpoint)
    runtime.attach(FakeCri(), RuntimeVersion("fake", "1", "v1", "0.1.0"))
    h = Harness(MEMORY_HARD, [GUARANTEED, BEST_EFFORT], runtime=runtime)
    h.node.memory = {"uid-guaranteed": 900 * MiB}  # the best-effort pod has no cgroup: its containers' sum
    h.node.set(Signal.MEMORY_AVAILABLE, 500 * MiB)
    async with h.running():
        await trio.sleep(1)
        assert h.evictions() == [("uid-besteffort", 0.0)]
        evict = h.inbox.messages[0]
        assert "Container app was using 100Mi, request is 0" in evict.message  # the latest attempt
        assert evict.annotations["offending_containers"] == "app"
        assert evict.annotations["offending_containers_usage"] == "100Mi"


def test_settings_refuse_a_period_that_is_not_positive():
    with pytest.raises(ValueError, match="must be positive"):
        EvictionSettings(thresholds=[], monitoring_period=0)
