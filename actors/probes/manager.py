"""The probe manager: starts and stops the probe workers (Go's prober manager).

Pod workers send it ProbeTargets after each sync (which containers of the pod run, by
id). It keeps one worker per running container x probe kind as a dynamic child of the
probes supervisor, named "<pod uid>.<container>.<kind>": a new container id replaces the
worker, a container that stopped loses its worker and its results.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import trio

from pykubelet.messages.pod import Container, Pod
from pykubelet.messages.probes import ProbeKind, ProbeTargets
from pykubelet.pods.probes import PROBE_KINDS, probe_of, resolve_probe
from pykubelet.supervisor import ActorContext, ChildSpec, Supervisor, SupervisorError
from pykubelet.supervisor.verbosity import V

from .results import ProbeResults

log = logging.getLogger("pykubelet.prober")

WORKER_SHUTDOWN = 2.0  # seconds a stopped worker may take (an exec in flight is cancelled)


@dataclass(frozen=True)
class ProbeTarget:
    """What one probe worker probes."""

    pod: Pod
    container_name: str
    container_id: str
    kind: ProbeKind
    started_at: float  # Unix seconds the container started
    jitter: float = 0.0  # seconds before the first probe

    @property
    def child_name(self) -> str:
        return worker_name(self.pod.metadata.uid, self.container_name, self.kind)


MakeWorker = Callable[[ProbeTarget], Callable[[ActorContext], Awaitable[None]]]


def worker_name(pod_uid: str, container_name: str, kind: ProbeKind) -> str:
    return f"{pod_uid}.{container_name}.{kind}"


def parse_worker_name(name: str) -> tuple[str, str, ProbeKind] | None:
    parts = name.rsplit(".", 2)
    if len(parts) != 3 or parts[2] not in PROBE_KINDS:
        return None
    return parts[0], parts[1], parts[2]  # type: ignore[return-value]


def probed_containers(pod: Pod) -> list[Container]:
    """The containers probes run in: regular ones and sidecars (restartable init containers)."""
    sidecars = [c for c in pod.spec.init_containers if c.restart_policy == "Always"]
    return [*pod.spec.containers, *sidecars]


def probe_manager_actor(
    *,
    tree: Callable[[], Supervisor],
    results: ProbeResults,
    make_worker: MakeWorker,
    workers: str = "root/probes",
    rng: Callable[[], float] = random.random,
):
    """`workers` is the path of the supervisor the workers run under (the manager's own);
    `tree()` is the root supervisor, to find it."""
    first_start: list[float] = []  # trio time of the first incarnation: Go's manager.start

    async def run(ctx: ActorContext) -> None:
        assert ctx.mailbox is not None
        if not first_start:
            first_start.append(trio.current_time())
        manager = ProbeManager(tree().find_supervisor(workers), results, make_worker, first_start[0], rng)
        await manager.adopt()
        async for message in ctx.mailbox:
            await manager.handle(message)

    return run


@dataclass(frozen=True)
class _Running:
    pod_uid: str
    container_name: str
    kind: ProbeKind
    container_id: str


class ProbeManager:
    def __init__(
        self, supervisor: Supervisor, results: ProbeResults, make_worker: MakeWorker,
        kubelet_started: float, rng: Callable[[], float],
    ) -> None:
        self.supervisor = supervisor
        self.results = results
        self.make_worker = make_worker
        self.kubelet_started = kubelet_started
        self.rng = rng
        self.running: dict[str, _Running] = {}  # child name -> what its worker probes

    async def adopt(self) -> None:
        """After a restart of the manager alone, take over the workers still running: the
        board says which container each probes; one the board does not know is stopped."""
        for child in self.supervisor.snapshot().children:
            parsed = parse_worker_name(child.name)
            if parsed is None:
                continue
            entry = self.results.get(*parsed)
            if entry is None:
                await self._stop(child.name)
            else:
                self.running[child.name] = _Running(*parsed, entry.container_id)

    async def handle(self, message: ProbeTargets) -> None:
        uid = message.pod_uid
        desired = self._desired(message)
        for name, running in list(self.running.items()):
            if running.pod_uid != uid:
                continue
            want = desired.get(name)
            if want is None or want.container_id != running.container_id:
                await self._stop(name)
                self.results.remove(uid, running.container_name, running.kind)
        if message.pod is None:
            self.results.remove_pod(uid)
            return
        for name, target in desired.items():
            if name in self.running and self.supervisor.has_child(name):
                continue
            # New, or its worker ended: a worker for a container the board knows resumes
            # from what was published for it.
            await self._start(target)

    def _desired(self, message: ProbeTargets) -> dict[str, ProbeTarget]:
        pod = message.pod
        if pod is None:
            return {}
        now = trio.current_time()
        targets = {}
        for container in probed_containers(pod):
            container_id = message.running.get(container.name)
            if not container_id:
                continue
            for kind in PROBE_KINDS:
                probe = probe_of(container, kind)
                if probe is None:
                    continue
                target = ProbeTarget(
                    pod, container.name, container_id, kind,
                    started_at=message.started_at.get(container.name, time.time()),
                    jitter=self._jitter(probe, now),
                )
                targets[target.child_name] = target
        return targets

    def _jitter(self, probe, now: float) -> float:
        # Go: right after the kubelet starts, every worker starts at once; spread their first
        # probe over a random part of the period. Later workers probe at once.
        try:
            period = resolve_probe(probe).period
        except ValueError:
            return 0.0
        return self.rng() * period if now - self.kubelet_started < period else 0.0

    async def _start(self, target: ProbeTarget) -> None:
        name = target.child_name
        spec = ChildSpec(name, self.make_worker(target), restart="transient", shutdown=WORKER_SHUTDOWN)
        try:
            await self.supervisor.start_child(spec)
        except SupervisorError:
            await self._stop(name)  # a worker this manager did not know of
            await self.supervisor.start_child(spec)
        self.running[name] = _Running(target.pod.metadata.uid, target.container_name, target.kind, target.container_id)
        log.log(V(4), "probe worker started", extra={"probe_worker": name, "container_id": target.container_id})

    async def _stop(self, name: str) -> None:
        self.running.pop(name, None)
        if not self.supervisor.has_child(name):
            return
        try:
            await self.supervisor.stop_child(name)
        except LookupError:
            pass  # it ended meanwhile
