"""The event sink on MockClock against a fake API: new events created, repeats patched
(404 -> created again), the qps/burst limit, retries every 10 s then a drop after 12
tries, rejections not retried, and a full queue dropping its oldest event."""

from __future__ import annotations

import copy
import logging

import trio
from prometheus_client import CollectorRegistry

from pykubelet.actors.event_sink import EventSinkMetrics, event_sink_actor
from pykubelet.actors.events import EventRecorder, pod_reference
from pykubelet.messages.pod import Container, ObjectMeta, Pod, PodSpec
from pykubelet.pods.status import rfc3339
from pykubelet.ports.apiserver.errors import error_from_status, unavailable
from pykubelet.supervisor import ChildSpec
from tests.support.actors import running

WALL_START = 1_735_732_800.0  # 2025-01-01T12:00:00Z
NODE = "node-a"
EVENTS = "/api/v1/namespaces/default/events"


def api_error(status: int, reason: str, *, method: str, path: str) -> BaseException:
    return error_from_status(status, {"kind": "Status", "reason": reason, "message": reason.lower()},
                             method=method, path=path)  # fmt: skip


def down(path: str = EVENTS) -> BaseException:
    return unavailable(ConnectionRefusedError(111, "Connection refused"), method="POST", path=path,
                       url=f"https://127.0.0.1:6443{path}")  # fmt: skip


class FakeEventApi:
    """Events in memory by name; every call with its trio time; failures to raise, either
    once each (`fail_next`) or until cleared (`failure`)."""

    def __init__(self) -> None:
        self.events: dict[str, dict] = {}
        self.calls: list[tuple[float, str, str, dict]] = []
        self.fail_next: list[BaseException] = []
        self.failure: BaseException | None = None

    def _call(self, verb: str, path: str, body: dict) -> None:
        self.calls.append((trio.current_time(), verb, path, copy.deepcopy(body)))
        if self.fail_next:
            raise self.fail_next.pop(0)
        if self.failure is not None:
            raise self.failure

    async def create(self, path: str, body: dict) -> dict:
        self._call("POST", path, body)
        name = body["metadata"]["name"]
        if name in self.events:
            raise api_error(409, "AlreadyExists", method="POST", path=path)
        self.events[name] = copy.deepcopy(body)
        return body

    async def patch(self, path: str, body: dict) -> dict:
        self._call("PATCH", path, body)
        name = path.rsplit("/", 1)[-1]
        if name not in self.events:
            raise api_error(404, "NotFound", method="PATCH", path=path)
        self.events[name].update(body)
        return self.events[name]

    def verbs(self) -> list[tuple[float, str]]:
        return [(t, verb) for t, verb, _, _ in self.calls]


def pod(name: str = "web") -> Pod:
    return Pod(metadata=ObjectMeta(name=name, namespace="default", uid=f"uid-{name}"),
               spec=PodSpec(containers=[Container(name="app", image="busybox")]))  # fmt: skip


class Harness:
    def __init__(self, **settings) -> None:
        self.api = FakeEventApi()
        self.registry = CollectorRegistry()
        self.recorder = EventRecorder(self.registry, host=NODE, clock=lambda: WALL_START + trio.current_time())
        self.spec = ChildSpec("event-sink", event_sink_actor(
            client=self.api, recorder=self.recorder, metrics=EventSinkMetrics(self.registry),
            jitter=lambda: 0.5, **settings,
        ))  # fmt: skip

    def record(self, reason: str = "BackOff", message: str = "Back-off restarting failed container", *,
               name: str = "web") -> None:  # fmt: skip
        self.recorder.record(pod_reference(pod(name), "app"), "Warning", reason, message)

    def dropped(self, reason: str) -> float:
        return self.registry.get_sample_value("pykubelet_event_sink_dropped_total", {"reason": reason}) or 0.0


async def test_a_new_event_is_created_with_the_kubelets_source_and_reporting_fields(autojump_clock):
    h = Harness()
    async with running(h.spec):
        await trio.sleep(1.25)
        h.record("Pulling", 'Pulling image "busybox"')
        await trio.sleep(1)
        [(t, verb, path, body)] = h.api.calls
        name = f"web.{int((WALL_START + 1.25) * 1e9):x}"
        assert (t, verb, path) == (1.25, "POST", EVENTS)
        assert body == {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": "default"},
            "involvedObject": {"kind": "Pod", "namespace": "default", "name": "web", "uid": "uid-web",
                               "apiVersion": "v1", "fieldPath": "spec.containers{app}"},  # fmt: skip
            "reason": "Pulling",
            "message": 'Pulling image "busybox"',
            "type": "Warning",
            "count": 1,
            "firstTimestamp": "2025-01-01T12:00:01Z",
            "lastTimestamp": "2025-01-01T12:00:01Z",
            "source": {"component": "kubelet", "host": NODE},
            "reportingComponent": "kubelet",
            "reportingInstance": NODE,
        }
        assert h.registry.get_sample_value("pykubelet_event_sink_requests_total", {"verb": "create"}) == 1


async def test_a_repeated_event_is_patched_with_its_count_time_and_message(autojump_clock):
    h = Harness()
    async with running(h.spec):
        h.record()
        await trio.sleep(30)
        h.record()
        await trio.sleep(1)
        assert h.api.verbs() == [(0, "POST"), (30, "PATCH")]
        name = h.api.calls[0][3]["metadata"]["name"]
        _, _, path, patch = h.api.calls[1]
        assert path == f"{EVENTS}/{name}"
        assert patch == {"count": 2, "lastTimestamp": rfc3339(WALL_START + 30),
                         "message": "Back-off restarting failed container"}  # fmt: skip
        assert h.api.events[name]["count"] == 2
        assert h.api.events[name]["firstTimestamp"] == rfc3339(WALL_START)


async def test_a_patch_of_an_event_the_api_server_no_longer_has_creates_it(autojump_clock):
    h = Harness()
    async with running(h.spec):
        h.record()
        await trio.sleep(1)
        h.api.events.clear()  # expired (events live an hour)
        h.record()
        await trio.sleep(1)
        assert h.api.verbs() == [(0, "POST"), (1, "PATCH"), (1, "POST")]
        body = h.api.calls[-1][3]
        assert body["count"] == 2 and body["firstTimestamp"] == rfc3339(WALL_START)
        assert body["metadata"]["name"] == h.api.calls[0][3]["metadata"]["name"]


async def test_requests_are_limited_to_qps_after_a_burst(autojump_clock):
    h = Harness(qps=2, burst=3)
    async with running(h.spec):
        for i in range(7):
            h.record(name=f"p{i}")
        await trio.sleep(10)
        assert [t for t, _ in h.api.verbs()] == [0, 0, 0, 0.5, 1.0, 1.5, 2.0]
        assert len(h.api.events) == 7


async def test_the_kubelet_defaults_let_100_through_then_50_per_second(autojump_clock):
    h = Harness()
    async with running(h.spec):
        for i in range(150):
            h.record(name=f"p{i}")
        await trio.sleep(5)
        times = [t for t, _ in h.api.verbs()]
        assert len(times) == 150 and times[99] == 0 and times[-1] == 1.0


async def test_an_unreachable_api_server_is_retried_every_10s_then_the_event_dropped(autojump_clock, caplog):
    caplog.set_level(logging.WARNING, logger="pykubelet.event_sink")
    h = Harness()
    h.api.failure = down()
    async with running(h.spec) as tree:
        h.record()
        await trio.sleep(200)
        # first retry jittered (10 s x 0.5 here), then every 10 s; 12 tries in all
        assert [t for t, _ in h.api.verbs()] == [0, 5, 15, 25, 35, 45, 55, 65, 75, 85, 95, 105]
        assert h.dropped("retries_exhausted") == 1
        assert caplog.text.count("after 12 tries, dropped") == 1

        h.api.failure = None
        h.record("Pulling", "later")
        await trio.sleep(1)
        assert h.api.verbs()[-1] == (200, "POST") and len(h.api.events) == 1
        assert tree.snapshot().children[0].restarts == 0


async def test_a_server_error_is_retried_until_it_goes(autojump_clock):
    h = Harness()
    h.api.fail_next = [api_error(500, "InternalError", method="POST", path=EVENTS),
                       api_error(429, "TooManyRequests", method="POST", path=EVENTS)]  # fmt: skip
    async with running(h.spec):
        h.record()
        await trio.sleep(30)
        assert h.api.verbs() == [(0, "POST"), (5, "POST"), (15, "POST")]
        assert len(h.api.events) == 1 and h.dropped("retries_exhausted") == 0


async def test_a_rejected_event_is_dropped_at_once_with_one_log_line_a_minute(autojump_clock, caplog):
    caplog.set_level(logging.WARNING, logger="pykubelet.event_sink")
    h = Harness()
    h.api.failure = api_error(403, "Forbidden", method="POST", path=EVENTS)
    async with running(h.spec):
        for i in range(3):
            h.record(name=f"p{i}")
        await trio.sleep(30)
        assert h.api.verbs() == [(0, "POST")] * 3
        assert h.dropped("rejected") == 3
        assert caplog.text.count("API server rejected event") == 1
        await trio.sleep(40)
        h.record(name="p3")
        await trio.sleep(1)
        assert caplog.text.count("API server rejected event") == 2
        assert "(2 more like it in the last minute)" in caplog.text


async def test_an_already_existing_event_counts_as_delivered(autojump_clock):
    h = Harness()
    h.api.fail_next = [down()]
    async with running(h.spec):
        h.record()
        name = h.recorder.events()[0].metadata.name
        h.api.events[name] = {"metadata": {"name": name}}  # the lost answer's create took effect
        await trio.sleep(30)
        assert h.api.verbs() == [(0, "POST"), (5, "POST")]
        assert h.dropped("rejected") == 0 and h.dropped("retries_exhausted") == 0


async def test_a_full_queue_drops_its_oldest_event_and_never_blocks_the_recorder(autojump_clock, caplog):
    caplog.set_level(logging.WARNING, logger="pykubelet.event_sink")
    h = Harness(capacity=3)
    h.api.failure = down()
    async with running(h.spec):
        h.record(name="first")  # taken at once: the sink is stuck retrying it
        await trio.sleep(1)
        for i in range(5):
            h.record(name=f"p{i}")  # p0 and p1 give way
        assert h.dropped("sink_queue_full") == 2
        assert caplog.text.count("event sink queue full") == 1
        h.api.failure = None
        await trio.sleep(10)
        created = [body["involvedObject"]["name"] for _, verb, _, body in h.api.calls if verb == "POST"][-4:]
        assert created == ["first", "p2", "p3", "p4"]


async def test_repeats_waiting_in_the_queue_coalesce_into_one_request(autojump_clock):
    h = Harness()
    h.api.fail_next = [down()]
    async with running(h.spec):
        h.record(name="other")  # the sink waits 5 s to retry this one
        for i in range(4):
            h.record()  # web: created (count 1) then repeated, all while waiting
            await trio.sleep(0.5)
        await trio.sleep(10)
        web = [(verb, body.get("count")) for _, verb, path, body in h.api.calls
               if verb == "PATCH" or body["involvedObject"]["name"] == "web"]  # fmt: skip
        assert web == [("POST", 4)]  # never created before: a create, with its latest count


async def test_qps_zero_means_no_limit_as_gos_event_record_qps(autojump_clock):
    h = Harness(qps=0)
    async with running(h.spec):
        for i in range(300):
            h.record(name=f"p{i}")
        await trio.sleep(1)
        assert {t for t, _ in h.api.verbs()} == {0} and len(h.api.events) == 300
