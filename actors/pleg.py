"""The PLEG (pod lifecycle event generator): relists the runtime every second, diffs it
against the previous relist, and tells the sync loop which pods changed.

It also keeps the latest relist for the sync loop's housekeeping (pods in the runtime that
no source wants), reports its own health (the "pleg" check fails when no relist has
succeeded for 3 minutes, as in the Go kubelet) and the running pod/container gauges.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import trio
from prometheus_client import CollectorRegistry, Gauge, Histogram

from pykubelet.actors.health import HealthBoard
from pykubelet.actors.runtime_link import RuntimeHandle
from pykubelet.messages.pod_updates import PlegEvent
from pykubelet.ports.cri import CriError
from pykubelet.ports.cri.pods import Relist, relist
from pykubelet.supervisor import ActorContext

log = logging.getLogger("pykubelet.pleg")

CHECK = "pleg"
# Go's buckets for the relist histograms (metrics.DefBuckets).
_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)


@dataclass(frozen=True)
class PlegSettings:
    relist_period: float = 1.0
    relist_threshold: float = 180.0  # unhealthy after this long without a relist
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
        self.running_pods = Gauge(
            "kubelet_running_pods", "Number of pods that have a running pod sandbox", registry=registry
        )
        self.running_containers = Gauge(
            "kubelet_running_containers", "Number of containers currently running", ["container_state"],
            registry=registry,
        )


class RuntimePods:
    """The latest successful relist, for readers outside the PLEG (housekeeping)."""

    def __init__(self) -> None:
        self.latest: Relist | None = None


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


def pleg_actor(
    settings: PlegSettings, *, runtime: RuntimeHandle, health: HealthBoard, metrics: PlegMetrics, cache: RuntimePods
):
    async def run(ctx: ActorContext) -> None:
        health.register(CHECK, "no relist yet")
        sync_loop = ctx.registry.lookup(settings.send_to)
        previous: Relist | None = None  # a new incarnation reports every container once
        last_success = trio.current_time()
        last_start: float | None = None
        problem: str | None = None
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_watch_health, settings, health, lambda: last_success)
            while True:
                started = trio.current_time()
                if last_start is not None:
                    metrics.relist_interval.observe(started - last_start)
                last_start = started
                await runtime.wait_connected()
                clock = time.perf_counter()
                try:
                    current = await relist(runtime.client)
                except CriError as exc:
                    if str(exc) != problem:
                        log.warning("relist failed: %s", exc)
                        problem = str(exc)
                else:
                    metrics.relist_duration.observe(time.perf_counter() - clock)
                    problem = None
                    last_success = trio.current_time()
                    health.report(CHECK, True, f"relisted {len(current.sandboxes)} sandboxes")
                    for event in diff(previous, current):
                        await sync_loop.send(event)
                    previous = cache.latest = current
                    _set_gauges(metrics, current)
                await trio.sleep_until(started + settings.relist_period)

    return run


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


def _set_gauges(metrics: PlegMetrics, current: Relist) -> None:
    metrics.running_pods.set(len({s.pod_uid for s in current.sandboxes if s.ready}))
    counts = {"created": 0, "running": 0, "exited": 0, "unknown": 0}
    for container in current.containers:
        counts[container.state] = counts.get(container.state, 0) + 1
    for state, count in counts.items():
        metrics.running_containers.labels(state).set(count)
