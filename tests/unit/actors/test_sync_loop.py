"""The sync loop with recording pod workers: dispatch, admission, orphans, sources ready."""

from __future__ import annotations

import logging

import msgspec
import pytest
import trio
from prometheus_client import CollectorRegistry

from pykubelet.actors.events import EventRecorder
from pykubelet.actors.pleg import RuntimePods
from pykubelet.actors.pod_statuses import PodStatuses
from pykubelet.actors.sync_loop import NodeView, SyncLoopSettings, sync_loop_actor
from pykubelet.messages.pod import Pod
from pykubelet.messages.pod_updates import (
    ObjectsChanged,
    PlegEvent,
    PodUpdate,
    SourcesReady,
    SyncLoopMessage,
    SyncPod,
    TerminatePod,
)
from pykubelet.messages.runtime import Relist, RelistedSandbox
from pykubelet.supervisor import ChildSpec, MailboxSpec, Supervisor


def pod(uid: str, image: str = "busybox") -> Pod:
    return msgspec.convert(
        {"metadata": {"name": f"p-{uid}", "namespace": "default", "uid": uid},
         "spec": {"containers": [{"name": "c", "image": image}]}},
        Pod,
    )


class Node:
    def __init__(self, max_pods: int = 110, terminate_unwanted: bool = True, allocatable: dict | None = None) -> None:
        self.seen: list[tuple[str, str, str]] = []  # (uid, what, detail)
        self.terminations: list[TerminatePod] = []
        self.free = trio.Event()
        self.stalled = False
        self.statuses = PodStatuses()
        self.runtime_pods = RuntimePods()
        self.events = EventRecorder(CollectorRegistry(), host="node-1")
        settings = SyncLoopSettings(sync_frequency=60, max_pods=max_pods, terminate_unwanted=terminate_unwanted,
                                    node=NodeView(allocatable=allocatable or {}))

        def worker_actor(uid: str, spec: Pod | None):
            async def run(ctx):
                self.seen.append((uid, "started", "with spec" if spec else "orphan"))
                async for message in ctx.mailbox:
                    if self.stalled:
                        await self.free.wait()
                    if isinstance(message, TerminatePod):
                        self.seen.append((uid, "terminate", message.reason))
                        self.terminations.append(message)
                        return
                    assert isinstance(message, SyncPod)
                    self.seen.append((uid, "sync", message.pod.spec.containers[0].image))

            return run

        self.tree = Supervisor("root", [
            Supervisor.child_spec("pod-workers", []),
            ChildSpec(
                "sync-loop",
                sync_loop_actor(settings, tree=lambda: self.tree, worker_actor=worker_actor,
                                statuses=self.statuses, runtime_pods=self.runtime_pods, events=self.events),
                mailbox=MailboxSpec(capacity=64, durable=True, accepts=SyncLoopMessage.__args__),
            ),
        ])

    async def send(self, message) -> None:
        await self.tree.registry.lookup("root/sync-loop").send(message)
        await trio.sleep(0.1)

    def take(self) -> list[tuple[str, str, str]]:
        seen, self.seen = self.seen, []
        return seen


@pytest.fixture
async def node(nursery):
    node = Node(max_pods=2)
    await nursery.start(node.tree.run)
    return node


async def test_add_update_remove_reach_the_pod_worker(node, autojump_clock):
    await node.send(PodUpdate(op="ADD", source="file", pods=[pod("a")]))
    assert node.take() == [("a", "started", "with spec")]
    await node.send(PodUpdate(op="UPDATE", source="file", pods=[pod("a", image="busybox:2")]))
    await node.send(PlegEvent(pod_uid="a", type="ContainerDied"))
    assert node.take() == [("a", "sync", "busybox:2"), ("a", "sync", "busybox:2")]
    await node.send(PodUpdate(op="REMOVE", source="file", pods=[pod("a")]))
    assert node.take() == [("a", "terminate", "removed from its source (file)")]


async def test_a_pod_deleted_in_the_api_is_terminated_by_a_worker_told_its_name(node, autojump_clock):
    """A worker made only to terminate has no spec: the names come with TerminatePod, so
    that its PodTerminated lets the status manager delete the API object (BUG 3 of
    tests/simulation) even when the runtime holds nothing of the pod any more."""
    deleted = msgspec.structs.replace(pod("a"), metadata=msgspec.structs.replace(
        pod("a").metadata, deletion_timestamp="2026-01-01T00:00:00Z", deletion_grace_period_seconds=5))
    await node.send(PodUpdate(op="ADD", source="api", pods=[deleted]))
    assert node.take() == [("a", "started", "orphan"), ("a", "terminate", "deleted in the API server")]
    (terminate,) = node.terminations
    assert (terminate.namespace, terminate.name, terminate.grace_period_seconds) == ("default", "p-a", 5)


async def test_pods_beyond_max_pods_are_rejected_with_a_reason_in_pods(node, autojump_clock):
    await node.send(PodUpdate(op="ADD", source="file", pods=[pod("a"), pod("b"), pod("c")]))
    assert [s for s in node.take() if s[1] == "started"] == [("a", "started", "with spec"), ("b", "started", "with spec")]
    rejected = node.statuses.get("c")
    assert rejected.phase == "Failed" and rejected.reason == "OutOfpods"
    assert "used: 2, capacity: 2" in rejected.message
    assert [p.metadata.uid for p in node.statuses.pod_list().items] == ["c"]


async def test_orphans_are_terminated_only_after_sources_are_ready(node, autojump_clock):
    node.runtime_pods.latest = Relist(
        sandboxes=[RelistedSandbox(id="s", pod_uid="orphan", name="old", namespace="default", ready=True)],
        containers=[],
    )
    await node.send(PlegEvent(pod_uid="orphan", type="ContainerStarted"))
    await trio.sleep(5)  # housekeeping ticks pass too
    assert node.take() == []
    await node.send(SourcesReady(sources=["file"]))
    assert node.take() == [("orphan", "started", "orphan"), ("orphan", "terminate", "no source wants it")]
    node.runtime_pods.latest = Relist(sandboxes=[], containers=[])  # the PLEG sees it gone
    await trio.sleep(5)
    assert node.take() == []


async def test_without_terminate_unwanted_orphans_are_left_alone_runonce(nursery, autojump_clock):
    node = Node(terminate_unwanted=False)
    await nursery.start(node.tree.run)
    node.runtime_pods.latest = Relist(
        sandboxes=[RelistedSandbox(id="s", pod_uid="orphan", name="old", namespace="default", ready=True)],
        containers=[],
    )
    await node.send(SourcesReady(sources=["file"]))
    await node.send(PlegEvent(pod_uid="orphan", type="ContainerDied"))
    await trio.sleep(5)  # housekeeping ticks pass too
    assert node.take() == []


async def test_a_pod_whose_node_selector_does_not_match_is_rejected_with_node_affinity(node, autojump_clock):
    picky = msgspec.structs.replace(pod("picky"), spec=msgspec.structs.replace(pod("picky").spec, node_selector={"disk": "ssd"}))
    await node.send(PodUpdate(op="ADD", source="api", pods=[picky]))
    assert node.take() == []
    rejected = node.statuses.get("picky")
    assert (rejected.phase, rejected.reason) == ("Failed", "NodeAffinity")
    assert rejected.message == "Predicate NodeAffinity failed: node(s) didn't match Pod's node affinity/selector"


def requesting(uid: str, cpu: str) -> Pod:
    return msgspec.convert(
        {"metadata": {"name": f"p-{uid}", "namespace": "default", "uid": uid},
         "spec": {"containers": [{"name": "c", "image": "busybox", "resources": {"requests": {"cpu": cpu}}}]}},
        Pod,
    )


async def test_admission_counts_a_running_pods_requests_as_of_its_latest_spec(nursery, autojump_clock):
    node = Node(allocatable={"cpu": 1000})
    await nursery.start(node.tree.run)
    await node.send(PodUpdate(op="ADD", source="file", pods=[requesting("a", "400m")]))
    await node.send(PodUpdate(op="ADD", source="file", pods=[requesting("b", "200m")]))  # 600m of 1000m
    await node.send(PodUpdate(op="UPDATE", source="file", pods=[requesting("a", "700m")]))  # now 900m
    await node.send(PodUpdate(op="ADD", source="file", pods=[requesting("c", "200m")]))
    assert (node.statuses.get("c").phase, node.statuses.get("c").reason) == ("Failed", "OutOfcpu")
    await node.send(PodUpdate(op="REMOVE", source="file", pods=[requesting("b", "200m")]))  # 700m
    await node.send(PodUpdate(op="ADD", source="file", pods=[requesting("d", "300m")]))
    assert node.statuses.get("d") is None  # admitted (a worker's status; none from this fake)


async def test_a_removed_container_is_not_worth_a_sync_every_other_pleg_event_is(node, autojump_clock):
    await node.send(PodUpdate(op="ADD", source="file", pods=[pod("a")]))
    assert node.take() == [("a", "started", "with spec")]
    await node.send(PlegEvent(pod_uid="a", type="ContainerRemoved", container_id="c0"))
    assert node.take() == []
    for kind in ("ContainerStarted", "ContainerDied", "ContainerChanged", "SandboxChanged"):
        await node.send(PlegEvent(pod_uid="a", type=kind, container_id="c1"))
    assert node.take() == [("a", "sync", "busybox")] * 4


async def test_a_changed_config_map_syncs_the_pods_reading_it_and_no_others(node, autojump_clock):
    await node.send(PodUpdate(op="ADD", source="api", pods=[pod("a"), pod("b")]))
    node.take()
    await node.send(ObjectsChanged(pod_uids=["b", "gone"]))  # "gone": no longer desired
    assert node.take() == [("b", "sync", "busybox")]


def with_spec(p: Pod, **spec) -> Pod:
    return msgspec.convert({**msgspec.to_builtins(p), "spec": {**msgspec.to_builtins(p.spec), **spec}}, Pod)


async def test_a_pod_with_an_unimplemented_field_is_failed_naming_it_while_another_is_admitted(
    node, autojump_clock, caplog
):
    debug = with_spec(pod("debug"), ephemeralContainers=[{"name": "dbg", "image": "busybox"}])
    spread = with_spec(pod("spread"), topologySpreadConstraints=[
        {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"}])  # fmt: skip
    with caplog.at_level(logging.WARNING, logger="pykubelet.syncloop"):
        await node.send(PodUpdate(op="ADD", source="file", pods=[debug, spread]))
        await node.send(PodUpdate(op="UPDATE", source="file", pods=[spread]))
    assert node.take() == [("spread", "started", "with spec"), ("spread", "sync", "busybox")]
    rejected = node.statuses.get("debug")
    assert (rejected.phase, rejected.reason) == ("Failed", "UnsupportedPodSpec")
    assert rejected.message == (
        "pykubelet does not implement spec.ephemeralContainers; remove it or run the pod on another node")
    assert [(e.involved_object.uid, e.type, e.reason, e.message) for e in node.events.events()] == [
        ("debug", "Warning", "UnsupportedPodSpec", rejected.message)]
    # the admitted pod's ignored field is named once, however often the pod is synced
    assert [r.getMessage() for r in caplog.records if "topologySpreadConstraints" in r.getMessage()] == [
        "pod default/p-spread: spec.topologySpreadConstraints is the scheduler's; the kubelet ignores it"]


async def test_an_ephemeral_container_added_to_a_running_pod_is_named_in_an_event_not_failed(
    node, autojump_clock
):
    await node.send(PodUpdate(op="ADD", source="api", pods=[pod("a")]))
    debugged = with_spec(pod("a"), ephemeralContainers=[{"name": "dbg", "image": "busybox"}])
    for _ in range(2):
        await node.send(PodUpdate(op="UPDATE", source="api", pods=[debugged]))
    assert node.take() == [("a", "started", "with spec"), ("a", "sync", "busybox"), ("a", "sync", "busybox")]
    assert node.statuses.get("a") is None  # not failed
    assert [(e.reason, e.message, e.count) for e in node.events.events()] == [
        ("UnsupportedPodSpec",
         "pykubelet does not implement spec.ephemeralContainers; the running pod goes on without it", 1)]


async def test_the_syncloop_check_fails_when_the_loop_is_stuck_longer_than_gos_deadline(autojump_clock):
    from pykubelet.actors.health import HealthBoard
    from pykubelet.actors.sync_loop import _watch_health, sync_loop_deadline

    assert sync_loop_deadline(60) == 300 and sync_loop_deadline(600) == 1200
    health = HealthBoard()
    last = [trio.current_time()]
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_watch_health, health, SyncLoopSettings(sync_frequency=60), lambda: last[0])
        await trio.sleep(290)
        assert health.healthy
        await trio.sleep(25)  # 315 s without an iteration (the check looks every 10 s)
        (check,) = health.failing()
        assert check.name == "syncloop" and "longer than 300s" in check.detail
        last[0] = trio.current_time()
        await trio.sleep(11)
        assert health.healthy
        nursery.cancel_scope.cancel()


async def test_a_worker_with_a_full_mailbox_still_gets_the_newest_spec(node, autojump_clock):
    # Go keeps one latest-wins pending update per pod: a burst of edits faster than the
    # worker reads must not leave it on an older spec.
    await node.send(PodUpdate(op="ADD", source="file", pods=[pod("a")]))
    node.stalled = True
    for version in range(1, 41):  # far past the worker mailbox's 16
        await node.send(PodUpdate(op="UPDATE", source="file", pods=[pod("a", image=f"busybox:{version}")]))
    node.free.set()
    await trio.sleep(2.5)  # the loop delivers what waits after each message, housekeeping (2 s) included
    synced = [detail for uid, what, detail in node.take() if what == "sync"]
    assert synced[-1] == "busybox:40"
