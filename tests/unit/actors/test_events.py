"""The event recorder: client-go's correlator (count, aggregation, spam filter) on a fake
clock, the bounded ring, the filters, the log line and the metrics."""

from __future__ import annotations

import logging

import pytest
import trio
from prometheus_client import CollectorRegistry

from pykubelet.actors import events as ev
from pykubelet.actors.events import EventRecorder, pod_reference
from pykubelet.messages.events import ObjectReference
from pykubelet.messages.pod import Container, ObjectMeta, Pod, PodSpec

T0 = 1_735_732_800.0  # 2025-01-01T12:00:00Z


class FakeClock:
    def __init__(self, now: float = T0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def pod(name="web", namespace="default", uid="uid-web") -> Pod:
    return Pod(
        metadata=ObjectMeta(name=name, namespace=namespace, uid=uid),
        spec=PodSpec(
            init_containers=[Container(name="setup", image="busybox")],
            containers=[Container(name="app", image="busybox")],
        ),
    )


def recorder(clock=None, **kwargs) -> tuple[EventRecorder, CollectorRegistry, FakeClock]:
    registry = CollectorRegistry()
    clock = clock or FakeClock()
    return EventRecorder(registry, host="node-1", clock=clock, **kwargs), registry, clock


WEB = pod_reference(pod())


def test_pod_reference_names_the_container_by_its_field_path():
    assert WEB == ObjectReference(kind="Pod", namespace="default", name="web", uid="uid-web")
    assert pod_reference(pod(), "app").field_path == "spec.containers{app}"
    assert pod_reference(pod(), "setup").field_path == "spec.initContainers{setup}"


def test_an_event_is_stamped_named_and_sourced_as_go_does():
    rec, _, _ = recorder()
    event = rec.record(WEB, "Normal", ev.PULLING_IMAGE, 'Pulling image "busybox"', field_path="spec.containers{app}")
    assert event.involved_object.field_path == "spec.containers{app}"
    assert (event.type, event.reason, event.count) == ("Normal", "Pulling", 1)
    assert event.first_timestamp == event.last_timestamp == "2025-01-01T12:00:00Z"
    assert event.metadata.name == f"web.{int(T0 * 1e9):x}"
    assert event.metadata.namespace == "default"
    assert (event.source.component, event.source.host) == ("kubelet", "node-1")
    assert rec.events() == [event]


def test_identical_events_are_one_event_with_a_count_and_the_latest_time():
    rec, _, clock = recorder()
    first = rec.record(WEB, "Warning", ev.BACK_OFF_START_CONTAINER, "Back-off restarting failed container app")
    rec.record(WEB, "Normal", ev.KILLING_CONTAINER, "Stopping container app")
    clock.now += 90
    again = rec.record(WEB, "Warning", ev.BACK_OFF_START_CONTAINER, "Back-off restarting failed container app")
    assert again.count == 2
    assert again.first_timestamp == "2025-01-01T12:00:00Z"
    assert again.last_timestamp == "2025-01-01T12:01:30Z"
    assert again.metadata.name == first.metadata.name
    # one event each, the repeated one now newest
    assert [(e.reason, e.count) for e in rec.events()] == [("Killing", 1), ("BackOff", 2)]


def test_the_same_reason_on_another_container_is_another_event():
    rec, _, _ = recorder()
    rec.record(pod_reference(pod(), "app"), "Normal", ev.STARTED_CONTAINER, "Started container")
    rec.record(pod_reference(pod(), "setup"), "Normal", ev.STARTED_CONTAINER, "Started container")
    assert [e.count for e in rec.events()] == [1, 1]


def test_similar_events_aggregate_after_ten_with_different_messages():
    rec, _, clock = recorder()
    for i in range(9):
        clock.now += 1
        event = rec.record(WEB, "Warning", ev.CONTAINER_UNHEALTHY, f"Liveness probe failed: attempt {i}")
        assert event.message == f"Liveness probe failed: attempt {i}"
    clock.now += 1
    tenth = rec.record(WEB, "Warning", ev.CONTAINER_UNHEALTHY, "Liveness probe failed: attempt 9")
    assert tenth.message == "(combined from similar events): Liveness probe failed: attempt 9"
    assert tenth.count == 1
    clock.now += 1
    eleventh = rec.record(WEB, "Warning", ev.CONTAINER_UNHEALTHY, "Liveness probe failed: attempt 10")
    assert eleventh.message == "(combined from similar events): Liveness probe failed: attempt 10"
    assert eleventh.count == 2 and eleventh.first_timestamp == tenth.first_timestamp
    kept = rec.events()
    assert len(kept) == 10  # nine single events and the aggregate, which replaced itself
    assert kept[-1] == eleventh


def test_aggregation_counts_within_ten_minutes_of_the_last_similar_event():
    rec, _, clock = recorder()
    for i in range(9):
        rec.record(WEB, "Warning", ev.FAILED_SYNC, f"error {i}")
    clock.now += 601  # quiet for longer than the interval: counting starts over
    assert rec.record(WEB, "Warning", ev.FAILED_SYNC, "error 9").message == "error 9"


def test_different_reasons_do_not_aggregate():
    rec, _, _ = recorder()
    reasons = [ev.PULLING_IMAGE, ev.PULLED_IMAGE, ev.CREATED_CONTAINER, ev.STARTED_CONTAINER,
               ev.KILLING_CONTAINER, ev.FAILED_SYNC, ev.SANDBOX_CHANGED, ev.FAILED_POST_START_HOOK,
               ev.FAILED_PRE_STOP_HOOK, ev.CONTAINER_PROBE_WARNING, ev.CONTAINER_UNHEALTHY]
    for i, reason in enumerate(reasons):
        rec.record(WEB, "Normal", reason, f"message {i}")
    assert not any(e.message.startswith("(combined") for e in rec.events())


def test_spam_filter_lets_25_through_per_pod_then_one_every_5_minutes():
    rec, registry, clock = recorder()
    other = pod_reference(pod("db", uid="uid-db"))
    kept = [rec.record(WEB, "Warning", ev.BACK_OFF_START_CONTAINER, "Back-off") for _ in range(25)]
    assert [e.count for e in kept] == list(range(1, 26))
    assert rec.record(WEB, "Warning", ev.BACK_OFF_START_CONTAINER, "Back-off") is None
    assert rec.record(WEB, "Normal", ev.KILLING_CONTAINER, "Stopping") is None  # per pod, any reason
    assert rec.record(other, "Normal", ev.STARTED_CONTAINER, "Started") is not None  # another pod
    assert registry.get_sample_value("pykubelet_events_dropped_total") == 2

    clock.now += 299
    assert rec.record(WEB, "Warning", ev.BACK_OFF_START_CONTAINER, "Back-off") is None
    clock.now += 1  # 300 s: one token
    refilled = rec.record(WEB, "Warning", ev.BACK_OFF_START_CONTAINER, "Back-off")
    assert refilled.count == 28  # the dropped repeats were still counted, as in Go
    assert rec.record(WEB, "Warning", ev.BACK_OFF_START_CONTAINER, "Back-off") is None
    assert registry.get_sample_value("pykubelet_events_dropped_total") == 4


async def test_spam_filter_refills_on_trios_clock(autojump_clock):
    rec, _, _ = recorder(clock=trio.current_time)
    for _ in range(25):
        rec.record(WEB, "Warning", ev.BACK_OFF_PULL_IMAGE, 'Back-off pulling image "missing:1"')
    assert rec.record(WEB, "Warning", ev.BACK_OFF_PULL_IMAGE, 'Back-off pulling image "missing:1"') is None
    await trio.sleep(300)
    assert rec.record(WEB, "Warning", ev.BACK_OFF_PULL_IMAGE, 'Back-off pulling image "missing:1"') is not None


def test_the_ring_keeps_the_newest_events():
    rec, _, _ = recorder(capacity=3)
    for i in range(5):
        rec.record(pod_reference(pod(f"p{i}", uid=f"u{i}")), "Normal", ev.STARTED_CONTAINER, "Started")
    assert [e.involved_object.name for e in rec.events()] == ["p2", "p3", "p4"]


def test_events_filter_by_namespace_and_uid():
    rec, _, _ = recorder()
    rec.record(WEB, "Normal", ev.STARTED_CONTAINER, "Started")
    rec.record(pod_reference(pod("dns", "kube-system", "uid-dns")), "Normal", ev.STARTED_CONTAINER, "Started")
    rec.record(pod_reference(pod("api", "kube-system", "uid-api")), "Normal", ev.STARTED_CONTAINER, "Started")
    assert [e.involved_object.name for e in rec.events(namespace="kube-system")] == ["dns", "api"]
    assert [e.involved_object.name for e in rec.events(involved_uid="uid-web")] == ["web"]
    assert rec.events(namespace="default", involved_uid="uid-dns") == []


def test_metrics_count_recorded_events_by_type_and_reason():
    rec, registry, _ = recorder()
    rec.record(WEB, "Normal", ev.PULLED_IMAGE, "Pulled")
    rec.record(WEB, "Normal", ev.PULLED_IMAGE, "Pulled")
    rec.record(WEB, "Warning", ev.FAILED_TO_PULL_IMAGE, "Failed to pull")
    value = registry.get_sample_value
    assert value("pykubelet_events_total", {"type": "Normal", "reason": "Pulled"}) == 2
    assert value("pykubelet_events_total", {"type": "Warning", "reason": "Failed"}) == 1
    assert value("pykubelet_events_dropped_total") == 0


def test_one_log_line_per_recorded_event_and_none_for_spam(caplog):
    rec, _, _ = recorder(correlator=ev.EventCorrelator(burst=2))
    with caplog.at_level(logging.INFO, logger="pykubelet.actors.events"):
        for _ in range(3):
            rec.record(WEB, "Warning", ev.BACK_OFF_START_CONTAINER, "Back-off restarting failed container",
                       field_path="spec.containers{app}")
    assert [r.getMessage() for r in caplog.records] == ["event: Back-off restarting failed container"] * 2
    last = caplog.records[-1]
    assert (last.object, last.kind, last.type, last.reason, last.fieldPath, last.count) == (
        "default/web", "Pod", "Warning", "BackOff", "spec.containers{app}", 2,
    )


def test_an_unknown_event_type_is_a_bug():
    rec, _, _ = recorder()
    with pytest.raises(ValueError, match="neither Normal nor Warning"):
        rec.record(WEB, "Error", ev.FAILED_SYNC, "boom")


def test_go_uses_backoff_for_both_crash_loops_and_image_pulls():
    assert ev.BACK_OFF_START_CONTAINER == ev.BACK_OFF_PULL_IMAGE == "BackOff"
    assert ev.FAILED_TO_PULL_IMAGE == ev.FAILED_TO_START_CONTAINER == "Failed"
