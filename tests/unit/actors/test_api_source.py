"""The api source on MockClock against a scripted pods API: nothing sent before the first
list answers, the full set after it and after every watch event (bursts coalesced to one
send per 50 ms), 410 -> re-list with no change sent, errors backed off 0.5 s doubling to
30 s (logged once per change of error), a watch the server ends resumed from its last
resourceVersion."""

from __future__ import annotations

import copy
import logging
from typing import Any

import pytest
import trio

from pykubelet.actors.sources.api import PODS_PATH, ApiPodSet, api_source_actor
from pykubelet.messages.pod_updates import SourcePods
from pykubelet.ports.apiserver import WatchEvent, error_from_status, unavailable
from pykubelet.supervisor import ChildSpec
from tests.support.actors import Inbox, running

NODE = "node1"
SELECTOR = f"spec.nodeName={NODE}"


def server_error(status: int = 500, *, verb_path: str = PODS_PATH) -> BaseException:
    return error_from_status(status, {"kind": "Status", "reason": "InternalError", "message": "etcd is sad"},
                             method="GET", path=verb_path)


def gone() -> BaseException:
    return error_from_status(410, {"kind": "Status", "reason": "Expired", "message": "too old resource version"},
                             method="GET", path=PODS_PATH, params={"watch": "true"})


def refused() -> BaseException:
    return unavailable(ConnectionRefusedError(111, "Connection refused"), method="GET", path=PODS_PATH,
                       url="https://127.0.0.1:6443" + PODS_PATH)


def pod_object(name: str, *, node: str = NODE, uid: str | None = None, **meta: Any) -> dict[str, Any]:
    return {
        "kind": "Pod", "apiVersion": "v1",
        "metadata": {"name": name, "namespace": "default", "uid": uid or f"uid-{name}", **meta},
        "spec": {"nodeName": node, "containers": [{"name": "main", "image": "busybox"}]},
        "status": {"phase": "Pending"},
    }


_END = object()


class FakeWatch:
    def __init__(self, api: FakePodsApi, params: dict[str, Any]) -> None:
        self.api = api
        self.params = params
        self.resource_version = str(params.get("resourceVersion") or "")
        self.send, self.receive = trio.open_memory_channel[Any](1000)

    async def __aenter__(self) -> FakeWatch:
        self.api.calls.append((trio.current_time(), "watch", dict(self.params)))
        if self.api.watch_errors:
            raise self.api.watch_errors.pop(0)
        self.api.open.append(self)
        for event in self.api.history_after(int(self.resource_version)):
            self.send.send_nowait(event)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self in self.api.open:
            self.api.open.remove(self)

    def __aiter__(self) -> FakeWatch:
        return self

    async def __anext__(self) -> WatchEvent:
        item = await self.receive.receive()
        if item is _END:
            raise StopAsyncIteration
        if isinstance(item, BaseException):
            raise item
        if item.resource_version:
            self.resource_version = item.resource_version
        return item


class FakePodsApi:
    """Pods in memory with resourceVersions, list, watch (with history), failures on demand."""

    def __init__(self) -> None:
        self.pods: dict[str, dict[str, Any]] = {}
        self.rv = 10
        self.history: list[tuple[int, WatchEvent]] = []
        self.open: list[FakeWatch] = []
        self.calls: list[tuple[float, str, dict[str, Any]]] = []
        self.list_errors: list[BaseException] = []
        self.watch_errors: list[BaseException] = []

    # the server side
    def _emit(self, event_type: str, obj: dict[str, Any]) -> None:
        self.rv += 1
        obj = copy.deepcopy(obj)
        obj["metadata"]["resourceVersion"] = str(self.rv)
        if event_type == "DELETED":
            self.pods.pop(obj["metadata"]["uid"], None)
        else:
            self.pods[obj["metadata"]["uid"]] = obj
        if obj["spec"].get("nodeName") != NODE:
            return  # the field selector: another node's pods are never served
        event = WatchEvent(type=event_type, object=obj)
        self.history.append((self.rv, event))
        for watch in self.open:
            watch.send.send_nowait(event)

    def add(self, obj: dict[str, Any]) -> None:
        self._emit("ADDED" if obj["metadata"]["uid"] not in self.pods else "MODIFIED", obj)

    def delete(self, uid: str) -> None:
        self._emit("DELETED", self.pods[uid])

    def quietly_add(self, obj: dict[str, Any]) -> None:
        """A change the open watches miss (as if they had been cut before it)."""
        self.rv += 1
        obj = copy.deepcopy(obj)
        obj["metadata"]["resourceVersion"] = str(self.rv)
        self.pods[obj["metadata"]["uid"]] = obj

    def break_watches(self, item: Any) -> None:
        for watch in list(self.open):
            watch.send.send_nowait(item)

    def bookmark(self) -> None:
        for watch in self.open:
            watch.send.send_nowait(WatchEvent(type="BOOKMARK", object={"kind": "Pod", "metadata": {"resourceVersion": str(self.rv)}}))

    def history_after(self, rv: int) -> list[WatchEvent]:
        return [event for version, event in self.history if version > rv]

    # the client calls
    async def list(self, path: str, params: dict[str, Any] | None = None) -> tuple[list[dict[str, Any]], str]:
        await trio.lowlevel.checkpoint()
        self.calls.append((trio.current_time(), "list", dict(params or {})))
        assert path == PODS_PATH and (params or {}).get("fieldSelector") == SELECTOR
        if self.list_errors:
            raise self.list_errors.pop(0)
        items = [copy.deepcopy(p) for p in self.pods.values() if p["spec"].get("nodeName") == NODE]
        return items, str(self.rv)

    def watch(self, path: str, params: dict[str, Any] | None = None) -> FakeWatch:
        assert path == PODS_PATH and (params or {}).get("fieldSelector") == SELECTOR
        return FakeWatch(self, dict(params or {}))

    def times(self, verb: str) -> list[float]:
        return [t for t, v, _ in self.calls if v == verb]


class Harness:
    def __init__(self, **settings: Any) -> None:
        settings.setdefault("jitter_source", lambda: 0.0)  # exact back-off gaps; jitter has its test
        self.api = FakePodsApi()
        self.inbox = Inbox()
        self.specs = [
            self.inbox.spec("pod-config"),
            ChildSpec("api", api_source_actor(client=self.api, node_name=NODE, **settings)),
        ]

    def sent(self) -> list[SourcePods]:
        return [m for m in self.inbox.messages if isinstance(m, SourcePods)]

    def names(self, index: int = -1) -> list[str]:
        return [p.metadata.name for p in self.sent()[index].pods]


# --- the set --------------------------------------------------------------------------


def test_the_set_decodes_pods_of_this_node_and_reports_what_does_not_decode():
    pods = ApiPodSet(NODE)
    bad = pod_object("bad")
    bad["spec"]["containers"] = "not a list"
    assert pods.replace([pod_object("b"), pod_object("a"), pod_object("other", node="node2"), bad])
    update = pods.source_pods()
    assert update.source == "api"
    assert [p.metadata.name for p in update.pods] == ["a", "b"]
    assert [(p.origin, p.source) for p in update.problems] == [("default/bad", "api")]
    assert "cannot decode" in update.problems[0].message
    # The same items again: no change.
    assert not pods.replace([pod_object("a"), pod_object("b"), bad])


def test_the_set_applies_events_and_says_when_they_changed_it():
    pods = ApiPodSet(NODE)
    pods.replace([])
    assert pods.apply(WatchEvent("ADDED", pod_object("a")))
    assert not pods.apply(WatchEvent("MODIFIED", pod_object("a")))  # nothing the kubelet reads changed
    changed = pod_object("a")
    changed["status"]["phase"] = "Running"
    assert pods.apply(WatchEvent("MODIFIED", changed))
    assert not pods.apply(WatchEvent("BOOKMARK", {"metadata": {"resourceVersion": "99"}}))
    assert pods.apply(WatchEvent("DELETED", changed))
    assert not pods.apply(WatchEvent("DELETED", changed))
    assert len(pods) == 0


# --- the actor ------------------------------------------------------------------------


async def test_nothing_is_sent_until_the_first_list_answers_then_the_full_set(autojump_clock):
    h = Harness()
    h.api.add(pod_object("web"))
    h.api.add(pod_object("elsewhere", node="node2"))
    h.api.list_errors = [refused(), server_error(503)]
    async with running(*h.specs):
        await trio.sleep(1.4)
        assert h.sent() == []  # pod config must not see the source before the API answered
        assert h.api.times("list") == [0, 0.5]
        await trio.sleep(0.2)
        assert h.api.times("list") == [0, 0.5, 1.5]
        assert [h.names(i) for i in range(len(h.sent()))] == [["web"]]
        (_, _, watch), = [c for c in h.api.calls if c[1] == "watch"]
        assert watch["resourceVersion"] == str(h.api.rv)
        assert watch["allowWatchBookmarks"] == "true"
        assert 300 <= int(watch["timeoutSeconds"]) <= 600


async def test_an_empty_node_still_makes_the_source_seen(autojump_clock):
    h = Harness()
    async with running(*h.specs):
        await trio.sleep(0.1)
        assert [m.pods for m in h.sent()] == [[]]


async def test_each_watch_event_resends_the_full_set(autojump_clock):
    h = Harness()
    h.api.add(pod_object("a"))
    async with running(*h.specs):
        await trio.sleep(1)
        h.api.add(pod_object("b"))
        await trio.sleep(1)
        running_b = pod_object("b")
        running_b["status"]["phase"] = "Running"
        h.api.add(running_b)
        await trio.sleep(1)
        h.api.delete("uid-a")
        await trio.sleep(1)
        h.api.bookmark()
        h.api.add(running_b)  # an event that changes nothing the kubelet reads
        await trio.sleep(1)
        sent = h.sent()
        assert [[p.metadata.name for p in m.pods] for m in sent] == [["a"], ["a", "b"], ["a", "b"], ["b"]]
        assert sent[2].pods[1].status.phase == "Running"
        assert h.api.times("list") == [0]  # no re-list while the watch works


async def test_pods_being_deleted_stay_in_the_set(autojump_clock):
    h = Harness()
    h.api.add(pod_object("a"))
    async with running(*h.specs):
        await trio.sleep(1)
        h.api.add(pod_object("a", deletionTimestamp="2026-01-01T00:00:30Z", deletionGracePeriodSeconds=30))
        await trio.sleep(1)
        (pod,) = h.sent()[-1].pods
        assert pod.metadata.deletion_timestamp == "2026-01-01T00:00:30Z"
        assert pod.metadata.deletion_grace_period_seconds == 30


async def test_a_burst_of_events_is_coalesced_into_at_most_one_send_per_50ms(autojump_clock):
    h = Harness()
    async with running(*h.specs):
        await trio.sleep(1)
        start = trio.current_time()
        for i in range(40):
            h.api.add(pod_object(f"p{i:02d}"))
        await trio.sleep(1)
        times = [t - start for t, m in zip(h.inbox.times, h.inbox.messages) if m.pods]
        assert 1 <= len(times) <= 2
        assert all(b - a >= 0.05 - 1e-9 for a, b in zip(times, times[1:]))
        assert len(h.sent()[-1].pods) == 40
        # Spread out, each change goes at once.
        h.api.add(pod_object("late"))
        await trio.sleep(0.01)
        assert len(h.sent()[-1].pods) == 41


async def test_410_relists_and_sends_nothing_when_the_set_is_the_same(autojump_clock):
    h = Harness()
    h.api.add(pod_object("a"))
    async with running(*h.specs):
        await trio.sleep(1)
        h.api.break_watches(gone())
        await trio.sleep(1)
        assert h.api.times("list") == [0, 1]  # at once, no back-off
        assert len(h.sent()) == 1  # same UIDs, same pods: pod config need not hear of it
        # A change missed while the watch was gone is found by the next re-list.
        h.api.quietly_add(pod_object("b"))
        h.api.history.clear()  # compacted: watching from an old version is 410
        h.api.watch_errors = [gone()]
        h.api.break_watches(refused())
        await trio.sleep(5)
        assert h.names() == ["a", "b"]


async def test_410_twice_in_a_row_backs_off(autojump_clock):
    h = Harness()
    async with running(*h.specs):
        await trio.sleep(0.1)
        h.api.watch_errors = [gone() for _ in range(4)]
        h.api.break_watches(gone())
        await trio.sleep(10)
        lists = h.api.times("list")
        assert lists[:2] == [0, 0.1]
        assert [round(b - a, 3) for a, b in zip(lists[1:], lists[2:])] == [0.5, 1.0, 2.0, 4.0]


async def test_errors_back_off_from_half_a_second_doubling_to_30s_and_log_once(autojump_clock, caplog):
    caplog.set_level(logging.INFO, logger="pykubelet.sources.api")
    h = Harness()
    async with running(*h.specs):
        await trio.sleep(0.1)
        h.api.watch_errors = [server_error() for _ in range(8)] + [refused() for _ in range(2)]
        h.api.break_watches(server_error())
        await trio.sleep(300)
        h.api.bookmark()  # the watch works again
        await trio.sleep(1)
        watches = h.api.times("watch")
        assert watches[:2] == [0, 0.6]  # broken at 0.1, back at 0.1 + 0.5
        gaps = [round(b - a, 3) for a, b in zip(watches[1:], watches[2:])]
        assert gaps == [1, 2, 4, 8, 16, 30, 30, 30, 30, 30]
        assert h.api.times("list") == [0]  # a broken watch resumes where it was: no re-list
        warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert len(warnings) == 2  # one per change of error, not one per attempt
        assert "500" in warnings[0] and "refused" in warnings[1]
        assert any("answers again" in r.getMessage() for r in caplog.records)


async def test_each_back_off_is_stretched_by_up_to_half_its_delay(autojump_clock):
    h = Harness(jitter_source=lambda: 0.5)  # a quarter: 0.5 s waits 0.625 s
    async with running(*h.specs):
        await trio.sleep(0.1)
        h.api.watch_errors = [server_error() for _ in range(3)]
        h.api.break_watches(server_error())
        await trio.sleep(20)
        watches = h.api.times("watch")
        assert [round(b - a, 3) for a, b in zip(watches[:-1], watches[1:])] == [0.725, 1.25, 2.5, 5.0]


async def test_the_back_off_resets_once_the_watch_delivers(autojump_clock):
    h = Harness()
    async with running(*h.specs):
        await trio.sleep(0.1)
        h.api.watch_errors = [server_error() for _ in range(3)]
        h.api.break_watches(server_error())
        await trio.sleep(20)
        h.api.add(pod_object("a"))
        await trio.sleep(1)
        start = trio.current_time()
        h.api.watch_errors = [server_error()]
        h.api.break_watches(server_error())
        await trio.sleep(5)
        assert [round(t - start, 3) for t in h.api.times("watch") if t >= start] == [0.5, 1.5]


async def test_a_watch_the_server_ends_resumes_from_its_last_resource_version(autojump_clock):
    h = Harness()
    async with running(*h.specs):
        await trio.sleep(0.1)
        h.api.add(pod_object("a"))
        await trio.sleep(0.1)
        last = str(h.api.rv)
        h.api.break_watches(_END)
        await trio.sleep(0.1)
        watches = [params for _, verb, params in h.api.calls if verb == "watch"]
        assert [w["resourceVersion"] for w in watches] == ["10", last]
        assert h.api.times("list") == [0]
        assert len(h.sent()) == 2  # [] then [a]; resuming sends nothing new


@pytest.mark.parametrize("settings", [{"backoff_initial": 0}, {"min_send_interval": -1}, {"backoff_max": 0.1}])
def test_bad_settings_are_refused(settings):
    with pytest.raises(ValueError):
        api_source_actor(client=FakePodsApi(), node_name=NODE, **settings)
