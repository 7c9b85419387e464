"""The PLEG (pod lifecycle event generator): follows the runtime's container events where it
offers them (CRI GetContainerEvents) and relists it as the safety net, diffs what it sees
against what it saw, and tells the sync loop which pods changed.

It also keeps the runtime's managed pods for the sync loop's housekeeping (pods in the
runtime that no source wants), reports its own health (the "pleg" check fails when no
relist has succeeded for 3 minutes, as in the Go kubelet) and the running pod/container
gauges.
"""

from __future__ import annotations

import contextlib
import logging
import time
from dataclasses import dataclass

import msgspec
import trio
from cri_api.v1 import api_pb2
from prometheus_client import CollectorRegistry, Gauge, Histogram

from pykubelet.actors.health import HealthBoard
from pykubelet.actors.runtime_link import RuntimeHandle
from pykubelet.actors.runtime_pods import RuntimeIndex, RuntimeItem, RuntimePods
from pykubelet.messages.pod_updates import PlegEvent
from pykubelet.messages.runtime import Relist, RelistedContainer, RelistedSandbox
from pykubelet.pods.backoff import ExponentialBackoff
from pykubelet.pods.labels import CONTAINER_NAME_LABEL, POD_UID_LABEL, is_managed
from pykubelet.ports.cri import CriError, EventsUnsupported
from pykubelet.ports.cri.pods import relist
from pykubelet.supervisor import ActorContext

log = logging.getLogger("pykubelet.pleg")

CHECK = "pleg"
# Go's buckets for the relist histograms (metrics.DefBuckets).
_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)

# While the runtime's events flow, the relist is only the safety net for what the stream
# misses. The Go kubelet's evented PLEG relists every 300s; we relist every 10s, because
# events do get lost: containerd 1.7 hands each event to only one of its subscribers and
# drops events when its buffer fills (containerd#7318, #8892), and the embedded runtime
# drops events for a subscriber 1000 behind. A relist costs two list calls (a few ms).
EVENTED_RELIST_PERIOD = 10.0


@dataclass(frozen=True)
class PlegSettings:
    relist_period: float = 1.0
    evented_relist_period: float = EVENTED_RELIST_PERIOD
    relist_threshold: float = 180.0  # unhealthy after this long without a relist
    # Follow the runtime's container events where it offers them (the Go kubelet's
    # EventedPLEG feature gate); off: relist only, every relist_period.
    container_events: bool = True
    # Re-subscribing to the runtime's events after a stream error.
    events_backoff_initial: float = 0.5
    events_backoff_max: float = 30.0
    send_to: str = "root/sync-loop"


class PlegMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.relist_duration = Histogram(
            "kubelet_pleg_relist_duration_seconds", "Duration in seconds for relisting pods in PLEG.",
            buckets=_BUCKETS, registry=registry,
        )
        self.relist_interval = Histogram(
            "kubelet_pleg_relist_interval_seconds", "Interval in seconds between relisting in PLEG.",
            buckets=_BUCKETS, registry=registry,
        )
        self.event_latency = Histogram(
            "kubelet_evented_pleg_connection_latency_seconds",
            "The latency of streaming connection with the CRI runtime, measured in seconds.",
            buckets=_BUCKETS, registry=registry,
        )
        self.running_pods = Gauge(
            "kubelet_running_pods", "Number of pods that have a running pod sandbox", registry=registry
        )
        self.running_containers = Gauge(
            "kubelet_running_containers", "Number of containers currently running", ["container_state"],
            registry=registry,
        )


# --- deciding: pure functions ----------------------------------------------------------


def diff(previous: Relist | None, current: Relist) -> list[PlegEvent]:
    """The events between two relists (Go's generic PLEG, per container and sandbox)."""
    before = {c.id: c for c in previous.containers} if previous else {}
    after = {c.id: c for c in current.containers}
    events: list[PlegEvent] = []
    for cid, container in after.items():
        old = before.get(cid)
        if old is not None and old.state == container.state:
            continue
        kind = {
            "running": "ContainerStarted",
            "exited": "ContainerDied",
            "created": "ContainerChanged",
            "unknown": "ContainerChanged",
        }[container.state]
        events.append(PlegEvent(pod_uid=container.pod_uid, type=kind, container_id=cid))
    for cid, container in before.items():
        if cid not in after:
            if container.state == "running":
                events.append(PlegEvent(pod_uid=container.pod_uid, type="ContainerDied", container_id=cid))
            events.append(PlegEvent(pod_uid=container.pod_uid, type="ContainerRemoved", container_id=cid))
    sandboxes_before = {s.id: s for s in previous.sandboxes} if previous else {}
    sandboxes_after = {s.id: s for s in current.sandboxes}
    for sid, old_sandbox in sandboxes_before.items():
        new_sandbox = sandboxes_after.get(sid)
        if new_sandbox is None or new_sandbox.ready != old_sandbox.ready:
            events.append(PlegEvent(pod_uid=old_sandbox.pod_uid, type="SandboxChanged", container_id=sid))
    return events


_EVENT_STATES = {
    api_pb2.CONTAINER_CREATED_EVENT: "created",
    api_pb2.CONTAINER_STARTED_EVENT: "running",
    api_pb2.CONTAINER_STOPPED_EVENT: "exited",
}


Change = tuple[RuntimeItem | None, RuntimeItem | None]  # one sandbox or container: (before, after)


def event_change(index: RuntimeIndex, event: api_pb2.ContainerEventResponse) -> Change | None:
    """What one runtime event changes in the view (None: it is about nothing managed).

    The event's type is the transition (CREATED -> created, STARTED -> running, STOPPED ->
    exited, DELETED -> gone); its statuses say only whether the container is ours and whose
    it is, as they were read after the transition. A sandbox's own events carry its id as
    the container id. A DELETED container or sandbox is in no status any more: it counts
    when the view knows it, which holds managed ones only.
    """
    cid, kind = event.container_id, event.container_event_type
    sandbox = event.pod_sandbox_status if event.HasField("pod_sandbox_status") else None
    if cid in index.sandboxes or (sandbox is not None and sandbox.id == cid):
        before = index.sandboxes.get(cid)
        known = before
        if known is None:
            if sandbox is None or not is_managed(dict(sandbox.labels)):
                return None
            known = RelistedSandbox(
                id=cid, pod_uid=sandbox.labels.get(POD_UID_LABEL, ""), name=sandbox.metadata.name,
                namespace=sandbox.metadata.namespace, ready=False,
            )
        if kind == api_pb2.CONTAINER_DELETED_EVENT:
            return before, None
        ready = kind != api_pb2.CONTAINER_STOPPED_EVENT and (
            sandbox is None or sandbox.id != cid or sandbox.state == api_pb2.SANDBOX_READY
        )
        return before, msgspec.structs.replace(known, ready=ready)
    before = index.containers.get(cid)
    known = before
    if known is None:
        status = next((s for s in event.containers_statuses if s.id == cid), None)
        if status is None or not is_managed(dict(status.labels)):
            return None
        known = RelistedContainer(
            id=cid, pod_uid=status.labels.get(POD_UID_LABEL, ""),
            name=status.labels.get(CONTAINER_NAME_LABEL, status.metadata.name), state="unknown",
        )
    if kind == api_pb2.CONTAINER_DELETED_EVENT:
        return before, None
    return before, msgspec.structs.replace(known, state=_EVENT_STATES.get(kind, "unknown"))


def event_to_pleg_events(index: RuntimeIndex, event: api_pb2.ContainerEventResponse) -> tuple[bool, list[PlegEvent]]:
    """Applies one runtime event to the view: (whether it changed, the PlegEvents), exactly
    what a relist would report for the same change, so events and relists never disagree
    on a transition. It diffs the one sandbox or container changed, not the whole view."""
    change = event_change(index, event)
    if change is None:
        return False, []
    before, after = change
    events = diff(_relist_of(before), _relist_of(after))
    if after is not None:
        index.put(after)
    elif before is not None:
        index.drop(before.id)
    return True, events


def _relist_of(item: RuntimeItem | None) -> Relist:
    if isinstance(item, RelistedSandbox):
        return Relist(sandboxes=[item], containers=[])
    return Relist(sandboxes=[], containers=[item] if item is not None else [])


# --- the actor -------------------------------------------------------------------------


def pleg_actor(
    settings: PlegSettings, *, runtime: RuntimeHandle, health: HealthBoard, metrics: PlegMetrics, cache: RuntimePods
):
    async def run(ctx: ActorContext) -> None:
        health.register(CHECK, "no relist yet")
        pleg = _Pleg(settings, runtime, health, metrics, cache, ctx.registry.lookup(settings.send_to))
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_watch_health, settings, health, lambda: pleg.last_success)
            if settings.container_events:
                nursery.start_soon(pleg.follow_events)
            await pleg.relist_forever()

    return run


class _Pleg:
    """One incarnation's state, shared by its relist loop and its event follower.

    `view` is what the sync loop has been told. Both tasks change it only between awaits,
    and each sends the events of its own change, so a transition is reported once: the
    relist diffs against a view that the events kept current. Events that arrive while a
    relist's list calls run are replayed on its result, since the lists may predate them.
    """

    def __init__(self, settings, runtime, health, metrics, cache, sync_loop) -> None:
        self.settings = settings
        self.runtime = runtime
        self.health = health
        self.metrics = metrics
        self.cache = cache
        self.sync_loop = sync_loop
        # What the sync loop has been told; None: a new incarnation reports every container once.
        self.index: RuntimeIndex | None = None
        self.last_success = trio.current_time()
        self.stream_opened_at: float | None = None  # the event stream is open since then
        self._during_relist: list[api_pb2.ContainerEventResponse] | None = None
        self._period_changed = trio.Event()

    def relist_period(self) -> float:
        # The stream counts once it has stayed open for one fast period: a runtime without
        # events refuses at once, and the fast relist in that period catches what happened
        # before the subscription.
        opened = self.stream_opened_at
        if opened is not None and trio.current_time() - opened > self.settings.relist_period:
            return self.settings.evented_relist_period
        return self.settings.relist_period

    async def relist_forever(self) -> None:
        last_start: float | None = None
        problem: str | None = None
        while True:
            started = trio.current_time()
            if last_start is not None:
                self.metrics.relist_interval.observe(started - last_start)
            last_start = started
            await self.runtime.wait_connected()
            clock = time.perf_counter()
            self._during_relist = []
            try:
                current = await relist(self.runtime.client)
            except CriError as exc:
                if str(exc) != problem:
                    log.warning("relist failed: %s", exc)
                    problem = str(exc)
            else:
                self.metrics.relist_duration.observe(time.perf_counter() - clock)
                problem = None
                self.last_success = trio.current_time()
                self.health.report(CHECK, True, f"relisted {len(current.sandboxes)} sandboxes")
                index = RuntimeIndex(current)
                for event in self._during_relist:
                    event_to_pleg_events(index, event)
                self._during_relist = None
                previous = self.index.relist() if self.index is not None else None
                await self._publish(index, diff(previous, index.relist()), relist_began=started)
            finally:
                self._during_relist = None
            await self._sleep_until_next_relist(started)

    async def _sleep_until_next_relist(self, started: float) -> None:
        # The period changes when the event stream opens or fails; a failed stream may have
        # lost events, so the relist comes at once rather than at the old, slow deadline.
        while True:
            deadline = started + self.relist_period()
            if trio.current_time() >= deadline:
                return
            with trio.move_on_at(deadline):
                await self._period_changed.wait()
            self._period_changed = trio.Event()

    async def follow_events(self) -> None:
        backoff = ExponentialBackoff(self.settings.events_backoff_initial, self.settings.events_backoff_max)
        problem: str | None = None
        while True:
            await self.runtime.wait_connected()
            try:
                async with contextlib.aclosing(self.runtime.client.container_events()) as events:
                    self.stream_opened_at = trio.current_time()
                    async for event in events:
                        if problem is not None:
                            log.info("following the runtime's container events again")
                            problem = None
                        backoff.reset()
                        await self._on_event(event)
                reason = "the runtime ended the container event stream"
            except EventsUnsupported:
                # As the Go kubelet, which falls back to relisting for good: a runtime that
                # lacks the call does not grow it while connected.
                log.info(
                    "runtime offers no container events; relisting every %gs", self.settings.relist_period,
                    extra={"endpoint": self.runtime.endpoint},
                )
                return
            except CriError as exc:
                reason = str(exc)
            finally:
                lasted = None if self.stream_opened_at is None else trio.current_time() - self.stream_opened_at
                self.stream_opened_at = None
                self._period_changed.set()
            if lasted is not None and lasted >= self.settings.evented_relist_period:
                backoff.reset()  # it worked for a while: not a loop
            delay = backoff.next_delay()
            if reason != problem:
                log.warning("container events: %s; relisting every %gs, subscribing again in %gs",
                            reason, self.settings.relist_period, delay)
                problem = reason
            await trio.sleep(delay)

    async def _on_event(self, event: api_pb2.ContainerEventResponse) -> None:
        if event.created_at:
            self.metrics.event_latency.observe(max(0.0, time.time() - event.created_at / 1e9))
        if self._during_relist is not None:
            self._during_relist.append(event)
        index = self.index if self.index is not None else RuntimeIndex()
        changed, events = event_to_pleg_events(index, event)
        if changed:
            await self._publish(index, events)

    async def _publish(self, index: RuntimeIndex, events: list[PlegEvent], *, relist_began: float | None = None) -> None:
        # The view changes before the first await, so the other task diffs against it.
        self.index = index
        if relist_began is not None:
            self.cache.relisted(index, relist_began)
        else:
            self.cache.index = index
        _set_gauges(self.metrics, index)
        for event in events:
            await self.sync_loop.send(event)


async def _watch_health(settings: PlegSettings, health: HealthBoard, last_success) -> None:
    while True:
        await trio.sleep(min(10.0, settings.relist_threshold / 2))
        idle = trio.current_time() - last_success()
        if idle > settings.relist_threshold:
            health.report(
                CHECK,
                False,
                f"PLEG is not healthy: pleg was last seen active {idle:.0f}s ago; "
                f"threshold is {settings.relist_threshold:.0f}s",
            )


def _set_gauges(metrics: PlegMetrics, index: RuntimeIndex) -> None:
    metrics.running_pods.set(index.ready_pods())
    for state in {"created", "running", "exited", "unknown", *index.states}:
        metrics.running_containers.labels(state).set(index.states.get(state, 0))
