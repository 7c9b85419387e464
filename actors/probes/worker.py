"""A probe worker: one actor per container x probe kind (Go's prober worker).

It probes its container every period, feeds each outcome to ProbeState, and when the
published result changes it writes the results board and tells the sync loop
(ProbeResult). The probe manager starts it for one container id and stops it when that
container goes; a crashed worker resumes from the board's result for its container.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Awaitable, Callable

import trio

from pykubelet.actors.events import CONTAINER_PROBE_WARNING, CONTAINER_UNHEALTHY, EventRecorder, pod_reference
from pykubelet.messages.pod import Container, Pod
from pykubelet.messages.probes import ProbeKind, ProbeOutcome, ProbeResult
from pykubelet.pods.probes import (
    FIELD,
    ProbeState,
    ResolvedProbe,
    container_path,
    is_gated,
    probe_of,
    resolve_probe,
    validate_probe,
    with_defaulted_probe,
)
from pykubelet.ports.probers import ProbeAnswer, run_probe
from pykubelet.supervisor import ActorContext
from pykubelet.supervisor.verbosity import V

from . import wakeups
from .metrics import ProbeMetrics
from .results import ProbeResults

log = logging.getLogger("pykubelet.prober")

MAX_PROBE_RETRIES = 3  # Go's maxProbeRetries: a probe that errors is tried again at once

# Timer slack: a probe due at t runs at the next multiple of this (in trio's clock), so
# that the probes due within the same 50 ms wake the daemon once, together, instead of
# each on its own: a wake-up is much of what a probe costs (110 exec calls a second to a
# runtime answering in 50 ms, in one process: 2.0 ms of CPU per call spread out, 1.2 ms
# coalesced). The schedule itself stays exact: a probe is never more than the slack late
# and the time between two probes is the period on average.
PROBE_TIMER_SLACK = 0.05

# (probe, container, container id, host) -> (outcome, message); the default runs the real
# handlers of ports/probers.py. Tests pass a fake.
ProbeHandler = Callable[[ResolvedProbe, Container, str, str], Awaitable[ProbeAnswer]]


def probe_worker_actor(
    pod: Pod,
    container_name: str,
    container_id: str,
    kind: ProbeKind,
    started_at: float,
    *,
    results: ProbeResults,
    metrics: ProbeMetrics,
    runtime,
    send_to: str = "root/sync-loop",
    host_ip: str = "127.0.0.1",
    jitter: float = 0.0,
    handler: ProbeHandler | None = None,
    events: EventRecorder | None = None,
):
    """The actor probing `kind` of container `container_name` (runtime id `container_id`,
    started at `started_at`, Unix seconds) of `pod`.

    runtime: a RuntimeHandle (its `.client` is the CriClient, for exec probes).
    host_ip: the probes' target when the pod has no IP of its own in pod.status.podIP
        (host-network pods, the embedded runtime).
    jitter: seconds to wait before the first probe (the manager spreads the workers it
        starts right after the kubelet starts, as Go does).
    """

    if handler is None:
        async def handler(probe: ResolvedProbe, container: Container, cid: str, host: str) -> ProbeAnswer:
            return await run_probe(probe, container, container_id=cid, host=host, cri=lambda: runtime.client)

    async def run(ctx: ActorContext) -> None:
        worker = ProbeWorker(
            pod, container_name, container_id, kind, started_at,
            results=results, metrics=metrics, handler=handler, send_to=send_to,
            host=pod.status.pod_ip or host_ip, jitter=jitter, events=events,
        )
        await worker.run(ctx)

    return run


def coalesced(deadline: float, slack: float) -> float:
    """`deadline` rounded up to the next multiple of `slack` (itself when it is one, give
    or take a float's rounding)."""
    return math.ceil(deadline / slack - 1e-9) * slack


class ProbeWorker:
    def __init__(
        self, pod: Pod, container_name: str, container_id: str, kind: ProbeKind, started_at: float, *,
        results: ProbeResults, metrics: ProbeMetrics, handler: ProbeHandler, send_to: str, host: str, jitter: float,
        events: EventRecorder | None = None,
    ) -> None:
        self.pod = pod
        self.events = events
        self.uid = pod.metadata.uid
        self.name = container_name
        self.container_id = container_id
        self.kind = kind
        self.started_at = started_at
        self.results = results
        self.metrics = metrics
        self.handler = handler
        self.send_to = send_to
        self.host = host
        self.jitter = jitter
        self.container = with_defaulted_probe(_find_container(pod, container_name), kind)
        if probe_of(self.container, kind) is None:
            raise ValueError(f"pod {pod.full_name}: container {container_name} has no {FIELD[kind]}")
        self._unknown_logged = False
        self.fields = {"pod": pod.full_name, "pod_uid": self.uid, "container": container_name, "probe": kind}
        self._labels = {
            "container": container_name, "pod": pod.metadata.name,
            "namespace": pod.metadata.namespace, "pod_uid": self.uid,
        }

    async def run(self, ctx: ActorContext) -> None:
        try:
            await self._run(ctx)
        except trio.Cancelled:
            self.metrics.forget(self.kind, **self._labels)  # stopped: this container is gone
            raise

    async def _run(self, ctx: ActorContext) -> None:
        problems = validate_probe(self.container, self.kind, container_path(self.pod, self.name))
        state = await self._resume_or_start(ctx, "; ".join(problems))
        if problems:
            # A probe that cannot run keeps its initial result: not ready, alive, not started.
            log.warning("%s probe cannot run: %s", self.kind, "; ".join(problems), extra=self.fields)
            await trio.sleep_forever()
        probe = resolve_probe(probe_of(self.container, self.kind))
        # The container's start in trio time: the initial delay counts from there.
        started = trio.current_time() - max(0.0, time.time() - self.started_at)
        next_at = max(started + probe.initial_delay, trio.current_time() + self.jitter)
        while not (state.on_hold or state.done):
            await wakeups.sleep_until(coalesced(next_at, PROBE_TIMER_SLACK))
            if not is_gated(self.kind, self.container, self._started()):
                await self._probe_once(ctx, probe, state)
            next_at += probe.period
            now = trio.current_time()
            if next_at < now:  # a probe slower than the period: skip the missed ticks, as a ticker
                next_at += math.ceil((now - next_at) / probe.period) * probe.period
        # A failed liveness/startup probe holds until there is a new container (the manager
        # then starts a new worker); a succeeded startup probe is not run again.
        await trio.sleep_forever()

    async def _resume_or_start(self, ctx: ActorContext, message: str) -> ProbeState:
        probe = probe_of(self.container, self.kind)
        entry = self.results.get(self.uid, self.name, self.kind)
        if entry is not None and entry.container_id == self.container_id:
            # A restarted incarnation for the same container: carry on from what was published.
            return ProbeState(self.kind, probe.success_threshold, probe.failure_threshold, result=entry.result)
        state = ProbeState(self.kind, probe.success_threshold, probe.failure_threshold)
        await self._publish(ctx, state.result, message, initial=True)
        return state

    def _started(self) -> bool:
        entry = self.results.get(self.uid, self.name, "startup")
        return entry is not None and entry.container_id == self.container_id and entry.result == "success"

    async def _probe_once(self, ctx: ActorContext, probe: ResolvedProbe, state: ProbeState) -> None:
        began = time.perf_counter()
        for _ in range(MAX_PROBE_RETRIES):
            outcome, message = await self.handler(probe, self.container, self.container_id, self.host)
            if outcome != "unknown":
                break
        self.metrics.observe(self.kind, outcome, time.perf_counter() - began, **self._labels)
        if outcome == "unknown":
            # Once per streak: the probe cannot be run (bad port, host not an IP, runtime down).
            if not self._unknown_logged:
                log.warning("%s probe could not be run: %s", self.kind, message, extra=self.fields)
            self._unknown_logged = True
        else:
            self._unknown_logged = False
            if outcome == "failure":
                log.log(V(4), "%s probe failed: %s", self.kind, message, extra=self.fields)
                # Every failed attempt, as Go; the recorder's correlator counts repeats.
                self._record("Warning", CONTAINER_UNHEALTHY, f"{self.kind.capitalize()} probe failed: {message}")
            elif message.startswith("Probe terminated redirects"):  # success, with a warning (Go)
                self._record("Warning", CONTAINER_PROBE_WARNING, f"{self.kind.capitalize()} probe warning: {message}")
        before = state.result
        if state.feed(outcome) != before:
            await self._publish(ctx, state.result, message)

    def _record(self, type: str, reason: str, message: str) -> None:
        if self.events is not None:
            self.events.record(pod_reference(self.pod, self.name), type, reason, message)

    async def _publish(self, ctx: ActorContext, result: ProbeOutcome, message: str, *, initial: bool = False) -> None:
        if not self.results.set(self.uid, self.name, self.kind, self.container_id, result, message):
            return
        if initial:
            log.log(V(4), "%s probe starts at %s", self.kind, result, extra=self.fields)
        elif result == "failure" and self.kind != "readiness":
            log.warning("%s probe failed, the container will be restarted: %s", self.kind, message,
                        extra=self.fields)
        elif result == "failure":
            log.log(V(1), "readiness probe failed: %s", message, extra=self.fields)
        else:
            log.log(V(3), "%s probe result: %s", self.kind, result, extra=self.fields)
        await ctx.registry.lookup(self.send_to).send(ProbeResult(
            pod_uid=self.uid, container_name=self.name, container_id=self.container_id,
            probe=self.kind, result=result, message=message,
        ))


def _find_container(pod: Pod, name: str) -> Container:
    for container in (*pod.spec.containers, *pod.spec.init_containers):
        if container.name == name:
            return container
    raise ValueError(f"pod {pod.full_name} has no container {name!r}")
