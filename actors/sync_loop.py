"""The sync loop: owns the desired pod set and dispatches work to the pod workers.

It reacts to PodUpdate (from pod config), PlegEvent (from the PLEG), and its own resync
(every --sync-frequency) and housekeeping (every 2s) ticks. It admits pods (--max-pods),
starts one pod worker per UID under root/pod-workers, and once every source has been
seen (SourcesReady) terminates pods the runtime holds that no source wants — never
before, so a kubelet restart does not kill what a slow source has not yet listed.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from collections.abc import Mapping
from typing import Awaitable, Callable

import trio

from pykubelet.actors.events import EventRecorder, pod_reference
from pykubelet.actors.pleg import RuntimePods
from pykubelet.actors.health import HealthBoard
from pykubelet.actors.pod_statuses import PodStatuses
from pykubelet.messages.pod import Pod, PodSpec, PodStatus
from pykubelet.messages.pod_updates import (
    EvictedPod,
    EvictPod,
    HousekeepingTick,
    ManifestProblems,
    ObjectsChanged,
    PlegEvent,
    PodUpdate,
    ProbeResult,
    SourcesReady,
    SyncLoopMessage,
    SyncPod,
    TerminatePod,
)
from pykubelet.pods.admission import UNSUPPORTED_POD_SPEC, admit
from pykubelet.pods.container_resources import pod_requests
from pykubelet.pods.eviction import admit_under_pressure
from pykubelet.pods.resources import qos_class
from pykubelet.pods.unsupported import unsupported_fields, why_ignored
from pykubelet.supervisor import ActorContext, ChildSpec, MailboxFull, MailboxSpec, Supervisor
from pykubelet.supervisor.verbosity import V

log = logging.getLogger("pykubelet.syncloop")

WorkerFactory = Callable[[str, Pod | None], Callable[[ActorContext], Awaitable[None]]]
WORKER_MAILBOX = MailboxSpec(capacity=16, durable=True, accepts=(SyncPod, TerminatePod, EvictedPod))
PressureConditions = Callable[[], "frozenset[str]"]
"""The node's pressure conditions now (MemoryPressure, DiskPressure, PIDPressure)."""


class DesiredPods:
    """The sync loop's desired pod UIDs, published for readers (garbage collection).

    `current()` is None until every source has been seen: before then no pod may be
    taken for deleted. `rejected`: the pods admission refused (--runonce reports them)."""

    def __init__(self) -> None:
        self.uids: frozenset[str] = frozenset()
        self.rejected: frozenset[str] = frozenset()
        self.sources_ready = False

    def current(self) -> set[str] | None:
        return set(self.uids) if self.sources_ready else None


@dataclass(frozen=True)
class NodeView:
    """What admission checks a pod against: the node's name, labels and allocatable
    (cpu in millicores, memory in bytes)."""

    name: str = "localhost"
    labels: dict[str, str] = field(default_factory=dict)
    allocatable: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class SyncLoopSettings:
    sync_frequency: float = 60.0  # --sync-frequency: each pod worker resyncs on its own
    housekeeping_period: float = 2.0  # the Go kubelet's housekeeping period
    max_pods: int = 110  # --max-pods
    workers: str = "root/pod-workers"
    node: NodeView = NodeView()
    # Terminate what the runtime holds that no source wants, once every source was seen.
    # --runonce does not (Go's runonce has no housekeeping): it leaves other pods alone.
    terminate_unwanted: bool = True


def sync_loop_actor(
    settings: SyncLoopSettings,
    *,
    tree: Callable[[], Supervisor],
    worker_actor: WorkerFactory,
    statuses: PodStatuses,
    runtime_pods: RuntimePods,
    published: DesiredPods | None = None,
    events: EventRecorder | None = None,
    health: HealthBoard | None = None,
    pressure: PressureConditions | None = None,
):
    """`pressure` gives the conditions the eviction manager observes (admission refuses
    pods under them). `worker_actor(uid, pod)` makes the actor function of a pod worker (see
    pod_workers.pod_worker_actor; pod is None for an orphan to terminate)."""

    async def run(ctx: ActorContext) -> None:
        loop = SyncLoop(settings, ctx, tree().find_supervisor(settings.workers), worker_actor, statuses, runtime_pods)
        loop.events = events
        if pressure is not None:
            loop.pressure = pressure
        view = published if published is not None else DesiredPods()
        view.uids, view.rejected, view.sources_ready = frozenset(), frozenset(), False  # a new incarnation starts empty
        assert ctx.mailbox is not None
        last_iteration = [trio.current_time()]
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_tick, ctx, HousekeepingTick(), settings.housekeeping_period)
            if health is not None:
                nursery.start_soon(_watch_health, health, settings, lambda: last_iteration[0])
            async for message in ctx.mailbox:
                await loop.handle(message)
                loop.deliver_undelivered()
                view.uids, view.sources_ready = frozenset(loop.desired), loop.sources_ready
                if view.rejected != loop.rejected:
                    view.rejected = frozenset(loop.rejected)
                last_iteration[0] = trio.current_time()

    return run


SYNC_LOOP_CHECK = "syncloop"


def sync_loop_deadline(sync_frequency: float) -> float:
    """How long the sync loop may go without an iteration before /healthz/syncloop fails:
    Go's syncLoop health, twice the resync interval but at least 5 minutes."""
    return max(2 * sync_frequency, 300.0)


async def _watch_health(health: HealthBoard, settings: SyncLoopSettings, last_iteration: Callable[[], float]) -> None:
    """The "syncloop" check: ok while the loop handled a message (housekeeping ticks come
    every 2 s) within sync_loop_deadline; a loop stuck in one message fails it."""
    deadline = sync_loop_deadline(settings.sync_frequency)
    while True:
        idle = trio.current_time() - last_iteration()
        if idle > deadline:
            health.report(SYNC_LOOP_CHECK, False, f"sync loop took {idle:.0f}s, longer than {deadline:.0f}s")
        else:
            health.report(SYNC_LOOP_CHECK, True, "syncing")
        await trio.sleep(min(10.0, deadline / 2))


async def _tick(ctx: ActorContext, message: SyncLoopMessage, period: float) -> None:
    while True:
        await trio.sleep(period)
        await ctx.mailbox.send(message)


class SyncLoop:
    def __init__(
        self,
        settings: SyncLoopSettings,
        ctx: ActorContext,
        workers: Supervisor,
        worker_actor: WorkerFactory,
        statuses: PodStatuses,
        runtime_pods: RuntimePods,
    ) -> None:
        self.settings = settings
        self.ctx = ctx
        self.workers = workers
        self.worker_actor = worker_actor
        self.statuses = statuses
        self.runtime_pods = runtime_pods
        self.desired: dict[str, Pod] = {}
        self.rejected: set[str] = set()
        self.warned: dict[str, set[str]] = {}  # per pod UID, the unsupported fields named once
        self.terminating: set[str] = set()  # asked to terminate, worker not yet gone
        self.events: EventRecorder | None = None
        self.sources_ready = False
        self.pressure: PressureConditions = frozenset
        self.undelivered: dict[str, Pod] = {}  # the newest spec of a pod whose worker's mailbox was full
        # Each admitted pod's requests, as of its spec: admission sums every running pod's,
        # and parsing each pod's quantities again at each admission made a node's start
        # O(pods^2) (16 ms an admission at 500 pods). uid -> (spec, requests).
        self._requests: dict[str, tuple[PodSpec, Mapping[str, int]]] = {}

    async def handle(self, message: SyncLoopMessage) -> None:
        if isinstance(message, PodUpdate):
            await self._on_update(message)
        elif isinstance(message, PlegEvent):
            # A removed container is not worth a sync (Go: isSyncPodWorthy); an orphan's
            # still is, so that it is terminated.
            if message.type != "ContainerRemoved" or message.pod_uid not in self.desired:
                await self._on_pod_event(message.pod_uid)
        elif isinstance(message, ProbeResult):
            await self._on_pod_event(message.pod_uid)
        elif isinstance(message, ObjectsChanged):
            for uid in message.pod_uids:
                if uid in self.desired:
                    await self._on_pod_event(uid)
        elif isinstance(message, HousekeepingTick):
            await self._housekeeping()
        elif isinstance(message, SourcesReady):
            if not self.sources_ready:
                then = ": pods no source wants will be terminated" if self.settings.terminate_unwanted else ""
                log.info("all sources seen (%s)%s", ", ".join(message.sources), then)
            self.sources_ready = True
            await self._housekeeping()
        elif isinstance(message, EvictPod):
            await self._evict(message)
        elif isinstance(message, ManifestProblems):
            log.log(V(4), "%d manifest problems", len(message.problems))

    async def _on_update(self, update: PodUpdate) -> None:
        for pod in update.pods:
            uid = pod.metadata.uid
            if update.op != "REMOVE" and pod.metadata.deletion_timestamp is not None:
                # Deleted in the API server: stop it with the grace period the deletion
                # carries; the status manager then deletes the object.
                self.desired.pop(uid, None)
                self.warned.pop(uid, None)
                if uid not in self.rejected:
                    await self._terminate(
                        uid, reason="deleted in the API server",
                        grace_period_seconds=pod.metadata.deletion_grace_period_seconds, pod=pod,
                    )
                continue
            if update.op == "ADD" and uid not in self.desired:
                if not self._admit(pod):
                    continue
                self.desired[uid] = pod
                log.log(V(2), "pod added from %s", update.source, extra={"pod": pod.full_name, "pod_uid": uid})
                await self._sync(pod)
            elif update.op in ("ADD", "UPDATE", "RECONCILE"):
                if uid in self.rejected:
                    continue
                self._warn_unsupported(pod)
                self.desired[uid] = pod
                await self._sync(pod)
            elif update.op == "REMOVE":
                self.desired.pop(uid, None)
                self.warned.pop(uid, None)
                if uid in self.rejected:
                    self.rejected.discard(uid)
                    self.statuses.remove(uid)
                    continue
                log.log(V(2), "pod removed from %s", update.source, extra={"pod": pod.full_name, "pod_uid": uid})
                await self._terminate(uid, reason=f"removed from its source ({update.source})", pod=pod)

    def _admit(self, pod: Pod) -> bool:
        """Go's admission: the pod's OS, pod count (--max-pods), cpu and memory requests
        against the node's allocatable, nodeSelector and required node affinity, nodeName;
        and pykubelet's: no field it does not implement (UnsupportedPodSpec)."""
        node = self.settings.node
        allocatable = {**node.allocatable, "pods": self.settings.max_pods}
        ok, reason, message = admit(
            pod, node_name=node.name, node_labels=node.labels, allocatable=allocatable,
            running_pods=[p for p in self.desired.values() if p.status.phase not in ("Succeeded", "Failed")],
            requests_of=self._pod_requests,
        )
        if ok:
            ok, reason, message = admit_under_pressure(pod, self.pressure())
        if ok:
            self._warn_unsupported(pod)
            return True
        log.warning("pod rejected: %s", message, extra={"pod": pod.full_name, "reason": reason})
        self.rejected.add(pod.metadata.uid)
        # qosClass too: the API server refuses a status that drops it (Go's rejectPod sets it).
        self.statuses.set(pod, PodStatus(phase="Failed", reason=reason, message=message, qos_class=qos_class(pod)))
        if self.events is not None:
            self.events.record(pod_reference(pod), "Warning", reason, message)
        return False

    def _pod_requests(self, pod: Pod) -> Mapping[str, int]:
        kept = self._requests.get(pod.metadata.uid)
        if kept is not None and kept[0] is pod.spec:
            return kept[1]
        requests = pod_requests(pod)
        self._requests[pod.metadata.uid] = (pod.spec, requests)
        return requests

    def _warn_unsupported(self, pod: Pod) -> None:
        """Name each ignored field of an admitted pod once. A refused field seen after
        admission was added to the running pod (the API allows that for ephemeral
        containers only): the pod is not failed for it, but an event says why nothing
        starts to whoever waits on kubectl debug."""
        uid = pod.metadata.uid
        fields = unsupported_fields(pod)
        named = self.warned.setdefault(uid, set())
        for path in (*fields.refused, *fields.ignored):
            if path in named:
                continue
            named.add(path)
            if path in fields.ignored:
                message = f"{path} {why_ignored(path)}"
            else:
                message = f"pykubelet does not implement {path}; the running pod goes on without it"
            log.warning("pod %s: %s", pod.full_name, message, extra={"pod": pod.full_name, "pod_uid": uid})
            if (path in fields.refused or path == "spec.ephemeralContainers") and self.events is not None:
                self.events.record(pod_reference(pod), "Warning", UNSUPPORTED_POD_SPEC, message)

    async def _on_pod_event(self, uid: str) -> None:
        """Something changed for this pod in the runtime (PLEG) or in a probe's result."""
        pod = self.desired.get(uid)
        if pod is not None:
            await self._sync(pod)
        elif self.sources_ready and self.settings.terminate_unwanted:
            await self._terminate(uid, reason="no source wants it")

    async def _housekeeping(self) -> None:
        self.terminating = {uid for uid in self.terminating if self.workers.has_child(uid)}
        for uid in self._requests.keys() - self.desired.keys():
            del self._requests[uid]
        for uid, pod in self.desired.items():
            if not self.workers.has_child(uid):  # its worker ended: a lost message, or a re-add
                await self._sync(pod)
        if not self.sources_ready or self.runtime_pods.latest is None or not self.settings.terminate_unwanted:
            return
        for uid in self.runtime_pods.latest.pod_uids() - self.desired.keys():
            if uid and not self.workers.has_child(uid):
                await self._terminate(uid, reason="no source wants it")

    async def _worker(self, uid: str, pod: Pod | None):
        if not self.workers.has_child(uid):
            spec = ChildSpec(
                uid,
                self.worker_actor(uid, pod),
                restart="transient",
                mailbox=WORKER_MAILBOX,
            )
            await self.workers.start_child(spec)
            return None  # a new worker syncs its pod at once
        return self.ctx.registry.lookup(f"{self.workers.path}/{uid}")

    async def _sync(self, pod: Pod) -> None:
        mailbox = await self._worker(pod.metadata.uid, pod)
        if mailbox is None:
            return
        try:
            mailbox.send_nowait(SyncPod(pod))
        except MailboxFull:
            # Latest wins (Go keeps one pending update per pod): this spec goes as soon as
            # the worker has room, replacing any older one still waiting.
            self.undelivered[pod.metadata.uid] = pod
        else:
            self.undelivered.pop(pod.metadata.uid, None)

    def deliver_undelivered(self) -> None:
        """Specs that found their worker's mailbox full, sent once it has room (after each
        message the loop handles, and at housekeeping)."""
        for uid, pod in list(self.undelivered.items()):
            if uid not in self.desired or not self.workers.has_child(uid):
                del self.undelivered[uid]
                continue
            try:
                self.ctx.registry.lookup(f"{self.workers.path}/{uid}").send_nowait(SyncPod(pod))
            except MailboxFull:
                continue
            del self.undelivered[uid]

    async def _evict(self, eviction: EvictPod) -> None:
        """The eviction manager's verdict goes to the pod's worker, which stops the pod for
        good and reports it Failed; the pod stays known until its source deletes it."""
        uid = eviction.pod_uid
        if uid not in self.desired or uid in self.terminating or not self.workers.has_child(uid):
            return
        await self.ctx.registry.lookup(f"{self.workers.path}/{uid}").send(EvictedPod(eviction))

    async def _terminate(
        self, uid: str, *, reason: str, grace_period_seconds: int | None = None, pod: Pod | None = None
    ) -> None:
        # A worker made only for this has no spec, so it syncs nothing before it terminates:
        # the preStop handlers and (unless given here) the grace period come from the
        # containers' annotations.
        if uid in self.terminating and self.workers.has_child(uid):
            return
        self.terminating.add(uid)
        mailbox = await self._worker(uid, None)
        if mailbox is None:
            mailbox = self.ctx.registry.lookup(f"{self.workers.path}/{uid}")
        names = {"namespace": pod.metadata.namespace, "name": pod.metadata.name} if pod is not None else {}
        await mailbox.send(TerminatePod(grace_period_seconds=grace_period_seconds, reason=reason, **names))
