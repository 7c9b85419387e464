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

import trio
from prometheus_client import CollectorRegistry, Gauge, Histogram

from pykubelet.actors.health import HealthBoard
from pykubelet.actors.pleg_diff import event_to_pleg_events, relist_events
from pykubelet.actors.runtime_link import RuntimeHandle
from pykubelet.actors.runtime_pods import RuntimeIndex, RuntimePods
from pykubelet.messages.cri_api import api_pb2
from pykubelet.messages.pod_updates import PlegEvent
from pykubelet.pods.backoff import ExponentialBackoff
from pykubelet.ports.cri import CriError, EventsUnsupported
from pykubelet.ports.cri.pods import list_managed
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
                listing = await list_managed(self.runtime.client)
            except CriError as exc:
                if str(exc) != problem:
                    log.warning("relist failed: %s", exc)
                    problem = str(exc)
            else:
                problem = None
                self.last_success = trio.current_time()
                self.health.report(CHECK, True, f"relisted {len(listing.sandboxes)} sandboxes")
                # The view changes in place, with no await until it is whole: the other task
                # and every reader see it before or after, never half-way.
                index = self.index if self.index is not None else RuntimeIndex()
                try:
                    events = relist_events(index, listing, self._during_relist)
                except BaseException:
                    self.cache.latest = None  # half updated: no reader may go by it
                    raise
                self._during_relist = None
                self._show(index, relist_began=started)
                # As Go's: the whole relist, its list calls, diff and cache update, up to
                # handing the events on (which Go does without waiting).
                self.metrics.relist_duration.observe(time.perf_counter() - clock)
                await self._send(events)
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
            self._show(index)
            await self._send(events)

    def _show(self, index: RuntimeIndex, *, relist_began: float | None = None) -> None:
        # Before the events go out, so the other task diffs against this view.
        self.index = index
        if relist_began is not None:
            self.cache.relisted(index, relist_began)
        else:
            self.cache.index = index
        _set_gauges(self.metrics, index)

    async def _send(self, events: list[PlegEvent]) -> None:
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
