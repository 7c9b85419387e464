"""The PLEG: which events a relist diff and a runtime container event produce, and when it
relists with and without the runtime's events (a fake runtime and a mock clock)."""

from __future__ import annotations

import logging

import pytest
import trio
from cri_api.v1 import api_pb2
from prometheus_client import CollectorRegistry

from pykubelet.actors.health import HealthBoard
from pykubelet.actors import pleg as pleg_module
from pykubelet.actors.pleg import PlegMetrics, PlegSettings, pleg_actor
from pykubelet.actors.pleg_diff import diff, event_to_pleg_events
from pykubelet.actors.runtime_pods import RuntimeIndex, RuntimePods
from pykubelet.actors.runtime_link import RuntimeHandle
from pykubelet.messages.pod_updates import PlegEvent
from pykubelet.messages.runtime import Relist, RelistedContainer, RelistedSandbox
from pykubelet.ports.cri import CriCallError, EventsUnsupported, RuntimeVersion
from pykubelet.supervisor import ChildSpec
from tests.support.actors import Inbox, running


def relist(containers: dict[str, str], sandboxes: dict[str, bool] | None = None) -> Relist:
    return Relist(
        sandboxes=[RelistedSandbox(id=sid, pod_uid="u", name="p", namespace="ns", ready=ready) for sid, ready in (sandboxes or {}).items()],
        containers=[RelistedContainer(id=cid, pod_uid="u", name=cid, state=state) for cid, state in containers.items()],
    )


@pytest.mark.parametrize(
    "before, after, expected",
    [
        (None, {"c1": "running"}, [("ContainerStarted", "c1")]),
        (None, {"c1": "exited"}, [("ContainerDied", "c1")]),
        ({"c1": "running"}, {"c1": "running"}, []),
        ({"c1": "created"}, {"c1": "running"}, [("ContainerStarted", "c1")]),
        ({"c1": "running"}, {"c1": "exited"}, [("ContainerDied", "c1")]),
        ({"c1": "running"}, {}, [("ContainerDied", "c1"), ("ContainerRemoved", "c1")]),
        ({"c1": "exited"}, {}, [("ContainerRemoved", "c1")]),
        ({"c1": "running"}, {"c1": "unknown"}, [("ContainerChanged", "c1")]),
    ],
)
def test_container_changes_become_events(before, after, expected):
    events = diff(relist(before) if before is not None else None, relist(after))
    assert [(e.type, e.container_id) for e in events] == expected
    assert all(isinstance(e, PlegEvent) and e.pod_uid == "u" for e in events)


@pytest.mark.parametrize(
    "before, after, expected",
    [
        ({"s1": True}, {"s1": True}, []),
        ({"s1": True}, {"s1": False}, [("SandboxChanged", "s1")]),
        ({"s1": True}, {}, [("SandboxChanged", "s1")]),
        ({}, {"s1": True}, []),
    ],
)
def test_sandbox_changes_become_events(before, after, expected):
    events = diff(relist({}, before), relist({}, after))
    assert [(e.type, e.container_id) for e in events] == expected


# -- the runtime's container events ----------------------------------------------------

MANAGED = {"io.pykubelet.managed": "true", "io.kubernetes.pod.uid": "u", "io.kubernetes.container.name": "main"}
UNMANAGED = {"io.kubernetes.pod.uid": "u", "io.kubernetes.container.name": "main"}

CREATED = api_pb2.CONTAINER_CREATED_EVENT
STARTED = api_pb2.CONTAINER_STARTED_EVENT
STOPPED = api_pb2.CONTAINER_STOPPED_EVENT
DELETED = api_pb2.CONTAINER_DELETED_EVENT


def container_event(
    kind: int, cid: str = "c1", labels: dict[str, str] | None = MANAGED
) -> api_pb2.ContainerEventResponse:
    """As the runtimes send it: the sandbox's status and its containers' statuses, in which
    a deleted container no longer appears."""
    statuses = [] if kind == DELETED or labels is None else [
        api_pb2.ContainerStatus(id=cid, metadata=api_pb2.ContainerMetadata(name="main"), labels=labels)
    ]
    return api_pb2.ContainerEventResponse(
        container_id=cid, container_event_type=kind, created_at=1,
        pod_sandbox_status=sandbox_status("s1", labels or {}), containers_statuses=statuses,
    )


def sandbox_status(sid: str, labels: dict[str, str], ready: bool = True) -> api_pb2.PodSandboxStatus:
    return api_pb2.PodSandboxStatus(
        id=sid, metadata=api_pb2.PodSandboxMetadata(name="p", namespace="ns", uid="u"), labels=labels,
        state=api_pb2.SANDBOX_READY if ready else api_pb2.SANDBOX_NOTREADY,
    )


def sandbox_event(kind: int, sid: str = "s1", labels: dict[str, str] = MANAGED, ready: bool = True):
    # A deleted sandbox has no status any more (containerd sends none).
    status = None if kind == DELETED else sandbox_status(sid, labels, ready)
    return api_pb2.ContainerEventResponse(container_id=sid, container_event_type=kind, pod_sandbox_status=status)


@pytest.mark.parametrize(
    "before, kind, expected",
    [
        (None, CREATED, [("ContainerChanged", "c1")]),
        ({"c1": "created"}, STARTED, [("ContainerStarted", "c1")]),
        (None, STARTED, [("ContainerStarted", "c1")]),
        ({"c1": "running"}, STOPPED, [("ContainerDied", "c1")]),
        ({"c1": "exited"}, DELETED, [("ContainerRemoved", "c1")]),
        # A running container deleted: died and removed, as a relist reports it.
        ({"c1": "running"}, DELETED, [("ContainerDied", "c1"), ("ContainerRemoved", "c1")]),
        # Already seen (by a relist or an earlier event): nothing new.
        ({"c1": "running"}, STARTED, []),
        ({"c1": "exited"}, STOPPED, []),
        # Deleted before anything told us of it: there is nothing to report.
        ({}, DELETED, []),
    ],
)
def test_container_event_becomes_pleg_event(before, kind, expected):
    index = RuntimeIndex(relist(before) if before is not None else None)
    _, events = event_to_pleg_events(index, container_event(kind))
    assert [(e.type, e.container_id) for e in events] == expected
    assert all(e.pod_uid == "u" for e in events)


@pytest.mark.parametrize("kind", [CREATED, STARTED, STOPPED])
def test_events_of_unmanaged_containers_are_ignored(kind):
    view = relist({"c2": "running"})
    index = RuntimeIndex(view)
    changed, events = event_to_pleg_events(index, container_event(kind, labels=UNMANAGED))
    assert events == [] and not changed and index.relist() is view


def test_event_without_the_containers_status_is_left_to_the_relist():
    index = RuntimeIndex()
    changed, events = event_to_pleg_events(index, container_event(STARTED, labels=None))
    assert events == [] and not changed and index.relist() == Relist(sandboxes=[], containers=[])


def test_relist_after_an_event_does_not_report_the_same_transition():
    index = RuntimeIndex(relist({"c1": "running"}))
    _, events = event_to_pleg_events(index, container_event(STOPPED))
    assert [e.type for e in events] == ["ContainerDied"]
    assert diff(index.relist(), relist({"c1": "exited"})) == []


def test_event_keeps_the_containers_name_and_pod():
    index = RuntimeIndex()
    event_to_pleg_events(index, container_event(STARTED))
    assert index.relist().containers == [RelistedContainer(id="c1", pod_uid="u", name="main", state="running")]
    assert index.relist().pod_uids() == {"u"} and index.holds("u")


@pytest.mark.parametrize(
    "before, event, expected",
    [
        ({"s1": True}, sandbox_event(STOPPED), [("SandboxChanged", "s1")]),
        ({"s1": True}, sandbox_event(DELETED), [("SandboxChanged", "s1")]),
        ({"s1": False}, sandbox_event(STOPPED), []),
        ({}, sandbox_event(CREATED), []),  # a new sandbox: the relist reports none either
        ({}, sandbox_event(DELETED), []),
        ({}, sandbox_event(CREATED, labels=UNMANAGED), []),
    ],
)
def test_sandbox_events_become_sandbox_changed(before, event, expected):
    _, events = event_to_pleg_events(RuntimeIndex(relist({}, before)), event)
    assert [(e.type, e.container_id) for e in events] == expected


def test_new_sandbox_from_an_event_is_in_the_view_for_housekeeping():
    index = RuntimeIndex()
    event_to_pleg_events(index, sandbox_event(CREATED))
    assert index.relist().sandboxes == [RelistedSandbox(id="s1", pod_uid="u", name="p", namespace="ns", ready=True)]
    assert index.ready_pods() == 1
    index = RuntimeIndex(relist({}))
    event_to_pleg_events(index, sandbox_event(CREATED, labels=UNMANAGED))
    assert index.relist().sandboxes == []


# -- the actor: events first, the relist as the safety net ------------------------------


class FakeRuntime:
    """The CRI calls the PLEG makes; the event stream is fed by the test. For unit tests of
    the actor's timing only: tests/integration/test_pleg_events.py runs the real thing."""

    def __init__(self, events: bool = True) -> None:
        self.events_supported = events
        self.containers: dict[str, str] = {}
        self.relists: list[float] = []
        self.subscriptions: list[float] = []
        self.stream: trio.MemorySendChannel | None = None
        self.stream_open = trio.Event()

    async def list_pod_sandbox(self, filter=None):
        self.relists.append(trio.current_time())
        return []

    async def list_containers(self, filter=None):
        return [
            api_pb2.Container(id=cid, state=state, labels=MANAGED) for cid, state in self.containers.items()
        ]

    async def list_pod_sandbox_and_containers(self, sandbox_filter, container_filter):
        return await self.list_pod_sandbox(sandbox_filter), await self.list_containers(container_filter)

    async def container_events(self):
        self.subscriptions.append(trio.current_time())
        if not self.events_supported:
            raise EventsUnsupported(endpoint="unix:///fake.sock", operation="get_container_events",
                                    code="UNIMPLEMENTED", detail="method GetContainerEvents not implemented")
        self.stream, receive = trio.open_memory_channel(16)
        self.stream_open.set()
        async with receive:
            async for item in receive:
                if isinstance(item, Exception):
                    raise item
                yield item

    async def emit(self, kind: int, cid: str = "c1") -> None:
        self.containers[cid] = {STARTED: api_pb2.CONTAINER_RUNNING, STOPPED: api_pb2.CONTAINER_EXITED,
                                CREATED: api_pb2.CONTAINER_CREATED}[kind]
        await self.stream.send(container_event(kind, cid))

    async def break_stream(self) -> None:
        self.stream_open = trio.Event()
        await self.stream.send(CriCallError(endpoint="unix:///fake.sock", operation="get_container_events",
                                            code="UNAVAILABLE", detail="connection reset"))


def pleg_tree(fake: FakeRuntime, inbox: Inbox):
    handle = RuntimeHandle("unix:///fake.sock")
    handle.attach(fake, RuntimeVersion("fake", "1", "v1", "0.1.0"))
    pleg = pleg_actor(PlegSettings(send_to="root/inbox"), runtime=handle, health=HealthBoard(),
                      metrics=PlegMetrics(CollectorRegistry()), cache=RuntimePods())
    return running(inbox.spec("inbox"), ChildSpec("pleg", pleg))


def gaps(times: list[float]) -> list[float]:
    return [round(b - a, 3) for a, b in zip(times, times[1:])]


async def test_without_runtime_events_it_relists_every_second_and_asks_once(autojump_clock, caplog):
    fake, inbox = FakeRuntime(events=False), Inbox()
    caplog.set_level(logging.INFO, "pykubelet.pleg")
    async with pleg_tree(fake, inbox):
        await trio.sleep(30.5)
    assert len(fake.subscriptions) == 1
    assert set(gaps(fake.relists)) == {1.0}
    assert [r.getMessage() for r in caplog.records if "container events" in r.getMessage()] == [
        "runtime offers no container events; relisting every 1s"
    ]


async def test_an_event_reaches_the_sync_loop_at_once_and_the_relist_slows_down(autojump_clock):
    fake, inbox = FakeRuntime(), Inbox()
    async with pleg_tree(fake, inbox):
        await fake.stream_open.wait()
        await trio.sleep(0.5)
        emitted = trio.current_time()
        await fake.emit(STARTED)
        await trio.sleep(0.01)
        assert [(m.type, m.container_id) for m in inbox.messages] == [("ContainerStarted", "c1")]
        assert inbox.times == [emitted]
        await trio.sleep(40)
        # One fast relist after subscribing catches what came before it; then every 10s.
        assert gaps(fake.relists)[:1] == [1.0] and set(gaps(fake.relists)[1:]) == {10.0}
        assert len(inbox.messages) == 1, "the relist must not report the transition again"


async def test_a_broken_stream_brings_the_fast_relist_back_at_once_and_resubscribes(autojump_clock):
    fake, inbox = FakeRuntime(), Inbox()
    async with pleg_tree(fake, inbox):
        await fake.stream_open.wait()
        await trio.sleep(15)
        fake.containers["c1"] = api_pb2.CONTAINER_EXITED  # a change whose event is lost
        broken = trio.current_time()
        await fake.break_stream()
        await trio.sleep(0.01)
        assert fake.relists[-1] == broken, "relist at once: the stream may have lost events"
        assert [(m.type, m.container_id) for m in inbox.messages] == [("ContainerDied", "c1")]
        await fake.stream_open.wait()
        assert fake.subscriptions[-1] == broken + 0.5  # the first back-off
        relists = len(fake.relists)
        await trio.sleep(3)
        assert len(fake.relists) - relists == 1, "fast for one period after subscribing, then slow"


# -- RuntimePods: when a pod worker need not read the runtime -----------------------------


async def test_runtime_pods_holds_nothing_only_after_a_relist_that_covers_every_creation(autojump_clock):
    pods = RuntimePods()
    assert not pods.holds_nothing_of("new")  # nothing relisted yet: unknown
    began = trio.current_time()
    pods.relisted(relist({"c1": "running"}, {"s1": True}), began)
    assert not pods.holds_nothing_of("u")  # the relist saw it
    assert pods.holds_nothing_of("new")
    await trio.sleep(0.5)
    pods.creating("new")  # a worker creates after the relist began: the view is behind
    assert not pods.holds_nothing_of("new")
    pods.relisted(relist({}), began)  # a relist that began before the creation: still behind
    assert not pods.holds_nothing_of("new")
    await trio.sleep(0.5)
    pods.relisted(relist({}), trio.current_time())  # began after it, and saw nothing: gone
    assert pods.holds_nothing_of("new")


async def test_runtime_pods_answers_from_the_view_it_holds_now_not_an_earlier_one(autojump_clock):
    pods = RuntimePods()
    pods.relisted(relist({}), trio.current_time())
    assert pods.holds_nothing_of("u")
    pods.latest = relist({"c1": "running"})  # a runtime event's view: the pod's container appeared
    assert not pods.holds_nothing_of("u")
    pods.latest = Relist(sandboxes=[RelistedSandbox(id="s1", pod_uid="u", name="p", namespace="ns", ready=False)],
                         containers=[])
    assert not pods.holds_nothing_of("u")  # a sandbox alone counts too
    pods.latest = relist({})
    assert pods.holds_nothing_of("u")


async def test_runtime_pods_follows_the_pleg_relists(autojump_clock):
    fake, inbox = FakeRuntime(events=False), Inbox()
    cache = RuntimePods()
    handle = RuntimeHandle("unix:///fake.sock")
    handle.attach(fake, RuntimeVersion("fake", "1", "v1", "0.1.0"))
    pleg = pleg_actor(PlegSettings(send_to="root/inbox"), runtime=handle, health=HealthBoard(),
                      metrics=PlegMetrics(CollectorRegistry()), cache=cache)
    async with running(inbox.spec("inbox"), ChildSpec("pleg", pleg)):
        await trio.sleep(0.5)
        assert cache.holds_nothing_of("u")
        cache.creating("u")
        fake.containers["c1"] = api_pb2.CONTAINER_RUNNING
        assert not cache.holds_nothing_of("u")
        await trio.sleep(1)  # the next relist sees the container
        assert not cache.holds_nothing_of("u")
        del fake.containers["c1"]
        await trio.sleep(1)  # and the one after sees it gone
        assert cache.holds_nothing_of("u")


async def test_a_relist_that_fails_half_way_leaves_no_view_for_the_pod_workers(autojump_clock, monkeypatch):
    # A relist updates the view in place: one that fails half-way must not leave a view
    # that pod workers would trust (unchanged_since, holds_nothing_of) until the restart's.
    fake, inbox = FakeRuntime(events=False), Inbox()
    fake.containers["c1"] = api_pb2.CONTAINER_RUNNING
    cache = RuntimePods()
    seen_by_restart: list[object] = []
    calls = 0
    real = pleg_module.relist_events

    def failing_once(index, listing, during):
        nonlocal calls
        calls += 1
        if calls == 2:
            index.drop("c1")
            raise RuntimeError("relist broke half-way")
        if calls == 3:
            seen_by_restart.append(cache.latest)
        return real(index, listing, during)

    monkeypatch.setattr(pleg_module, "relist_events", failing_once)
    handle = RuntimeHandle("unix:///fake.sock")
    handle.attach(fake, RuntimeVersion("fake", "1", "v1", "0.1.0"))
    pleg = pleg_actor(PlegSettings(send_to="root/inbox"), runtime=handle, health=HealthBoard(),
                      metrics=PlegMetrics(CollectorRegistry()), cache=cache)
    async with running(inbox.spec("inbox"), ChildSpec("pleg", pleg)) as tree:
        await trio.sleep(0.5)
        assert [c.id for c in cache.latest.containers] == ["c1"]
        await trio.sleep(5)
        assert calls >= 3 and seen_by_restart == [None]
        assert [c.id for c in cache.latest.containers] == ["c1"]  # the restarted PLEG's relist
        assert tree.snapshot().children[1].restarts == 1
