"""The sync loop with recording pod workers: dispatch, admission, orphans, sources ready."""

from __future__ import annotations

import msgspec
import pytest
import trio

from pykubelet.actors.pleg import RuntimePods
from pykubelet.actors.pod_statuses import PodStatuses
from pykubelet.actors.sync_loop import SyncLoopSettings, sync_loop_actor
from pykubelet.messages.pod import Pod
from pykubelet.messages.pod_updates import PlegEvent, PodUpdate, SourcesReady, SyncLoopMessage, SyncPod, TerminatePod
from pykubelet.ports.cri.pods import Relist, RelistedSandbox
from pykubelet.supervisor import ChildSpec, MailboxSpec, Supervisor


def pod(uid: str, image: str = "busybox") -> Pod:
    return msgspec.convert(
        {"metadata": {"name": f"p-{uid}", "namespace": "default", "uid": uid},
         "spec": {"containers": [{"name": "c", "image": image}]}},
        Pod,
    )


class Node:
    def __init__(self, max_pods: int = 110) -> None:
        self.seen: list[tuple[str, str, str]] = []  # (uid, what, detail)
        self.statuses = PodStatuses()
        self.runtime_pods = RuntimePods()
        settings = SyncLoopSettings(sync_frequency=60, max_pods=max_pods)

        def worker_actor(uid: str, spec: Pod | None):
            async def run(ctx):
                self.seen.append((uid, "started", "with spec" if spec else "orphan"))
                async for message in ctx.mailbox:
                    if isinstance(message, TerminatePod):
                        self.seen.append((uid, "terminate", message.reason))
                        return
                    assert isinstance(message, SyncPod)
                    self.seen.append((uid, "sync", message.pod.spec.containers[0].image))

            return run

        self.tree = Supervisor("root", [
            Supervisor.child_spec("pod-workers", []),
            ChildSpec(
                "sync-loop",
                sync_loop_actor(settings, tree=lambda: self.tree, worker_actor=worker_actor,
                                statuses=self.statuses, runtime_pods=self.runtime_pods),
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


async def test_a_pod_whose_node_selector_does_not_match_is_rejected_with_node_affinity(node, autojump_clock):
    picky = msgspec.structs.replace(pod("picky"), spec=msgspec.structs.replace(pod("picky").spec, node_selector={"disk": "ssd"}))
    await node.send(PodUpdate(op="ADD", source="api", pods=[picky]))
    assert node.take() == []
    rejected = node.statuses.get("picky")
    assert (rejected.phase, rejected.reason) == ("Failed", "NodeAffinity")
    assert rejected.message == "Predicate NodeAffinity failed: node(s) didn't match Pod's node affinity/selector"


async def test_a_removed_container_is_not_worth_a_sync_every_other_pleg_event_is(node, autojump_clock):
    await node.send(PodUpdate(op="ADD", source="file", pods=[pod("a")]))
    assert node.take() == [("a", "started", "with spec")]
    await node.send(PlegEvent(pod_uid="a", type="ContainerRemoved", container_id="c0"))
    assert node.take() == []
    for kind in ("ContainerStarted", "ContainerDied", "ContainerChanged", "SandboxChanged"):
        await node.send(PlegEvent(pod_uid="a", type=kind, container_id="c1"))
    assert node.take() == [("a", "sync", "busybox")] * 4
