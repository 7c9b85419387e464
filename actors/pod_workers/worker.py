"""The pod worker: one actor per pod UID that serialises that pod's syncs.

Each sync takes the pod's state from the runtime (or from the PLEG's view where that is
as fresh: see _runtime_status), asks compute_pod_actions what to do, does it over CRI, and
publishes the pod's status. Messages arriving during a sync are coalesced: the newest spec
wins, a TerminatePod sticks. A container in back-off makes the worker wake itself when the
back-off ends; a pod that needs the pod network waits, tried again every second or so,
while the runtime reports NetworkReady=false.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import time

import trio

from pykubelet.actors import events
from pykubelet.actors.events import pod_reference
from pykubelet.messages.cri_api import api_pb2
from pykubelet.messages.pod import Pod, PodCondition
from pykubelet.messages.pod_updates import EvictPod, TerminatePod
from pykubelet.messages.runtime import PodRuntimeStatus
from pykubelet.pods.actions import PodActions, compute_pod_actions, kill_already_done, probe_kill
from pykubelet.pods.active_deadline import (
    active_deadline_remaining,
    past_active_deadline,
    start_time_of,
)
from pykubelet.pods.backoff import ExponentialBackoff, jittered
from pykubelet.pods.hosts_file import PodHostnameError
from pykubelet.pods.network import network_not_ready
from pykubelet.pods.runtime_config import sandbox_config
from pykubelet.pods.security_context import SecurityContextError
from pykubelet.pods.status import ran_before
from pykubelet.ports.cgroups import CgroupError
from pykubelet.ports.cri import CriError
from pykubelet.ports.cri.pods import read_created, read_pod_status
from pykubelet.supervisor import ActorContext, Mailbox, Registry
from pykubelet.actors.volumes.manager import MountFailed, VolumeManager

from pykubelet.supervisor.verbosity import V

from .deps import PodWorkerDeps
from .container_setup import ObjectsNotReady, PodSetup, SandboxConfigError, sandbox_dns
from .container_start import ContainerStarts
from .messages import PodWorkerMessages, StartGivenUp
from .publishing import PodPublishing
from .start_slot import StartSlot
from .resize import PodResize, running_containers
from .termination import PodTermination

log = logging.getLogger("pykubelet.podworker")

RETRY_INITIAL, RETRY_MAX = 1.0, 10.0  # after a failed sync (runtime unavailable, ...)
RESYNC_JITTER = 0.5
RETRY_JITTER = 0.5  # Go: workerBackOffPeriodJitterFactor
# After a FailedMount; not jittered, as Go's volume operations' own exponential back-off.
MOUNT_RETRY_INITIAL, MOUNT_RETRY_MAX = 1.0, 30.0
NETWORK_RETRY = 1.0  # while the pod network is not ready (Go: backOffOnTransientErrorPeriod)


def pod_worker_actor(uid: str, pod: Pod | None, deps: PodWorkerDeps):
    """The actor for pod `uid`; `pod` is its spec when created (None: an orphan found in the
    runtime, which only ever gets TerminatePod)."""

    restarted = False
    # What an incarnation had taken from the mailbox and not yet carried out when it
    # crashed: the next one stops the pod all the same (the sync loop does not ask twice).
    terminate_asked: TerminatePod | None = None
    eviction: EvictPod | None = None

    async def run(ctx: ActorContext) -> None:
        nonlocal restarted, terminate_asked, eviction
        spec = pod
        if restarted:
            # Go on from the newest spec this worker published, not the one it was made
            # with: a crash after an edit would roll the pod back to its first spec, and
            # restart its changed containers twice (simulation BUG 5).
            spec = deps.statuses.source_pod(uid) or pod
        restarted = True
        worker = PodWorker(uid, spec, deps)
        worker.terminate_asked, worker.eviction = terminate_asked, eviction
        try:
            await worker.run(ctx)
        finally:
            terminate_asked, eviction = worker.terminate_asked, worker.eviction

    return run


class PodWorker(PodWorkerMessages, ContainerStarts, PodTermination, PodResize, PodPublishing):
    """One pod's syncs: this module drives them (read, decide, act, publish); taking the
    mailbox's messages is in messages.py, starting containers in container_start.py,
    stopping them in termination.py, resizing them in resize.py, publishing the status in
    publishing.py."""

    def __init__(self, uid: str, pod: Pod | None, deps: PodWorkerDeps) -> None:
        self.uid = uid
        self.pod = pod
        self.deps = deps
        self.first_seen = time.time()
        self.synced_once = False
        self.updated = False
        self.running_reported = False
        self.waiting: dict[str, tuple[str, str]] = {}
        self.created: tuple[list[str], list[str]] = ([], [])  # this sync's new sandbox and container ids
        self.registry: Registry | None = None
        self.volumes = deps.volumes or VolumeManager(deps.node.root_dir)
        self.setup: PodSetup | None = None  # this sync's objects, volumes and facts
        self.pod_ips: list[str] = []
        self.hosts_file: str | None = None
        # (container, restart count) -> its termination message file (None: it has no
        # terminationMessagePath), made with the pod's /etc/hosts before this sync's starts.
        self.message_files: dict[tuple[str, int], str | None] = {}
        self.mount_retry = ExponentialBackoff(MOUNT_RETRY_INITIAL, MOUNT_RETRY_MAX)
        self.deadline_reported = False
        self.volumes_released = False
        self.hosts_error: str | None = None  # why the pod's /etc/hosts could not be written
        self.eviction: EvictPod | None = None  # the eviction manager's verdict: the pod ends Failed
        # Container id -> the CRI resources it runs with, as created or last resized; a
        # container adopted after a kubelet restart is not in it and gets its spec's once.
        self.applied: dict[str, api_pb2.LinuxContainerResources] = {}
        self.resize_pending: PodCondition | None = None  # a resize that does not fit the node
        self.network_held = False  # the last sync stopped at NetworkNotReady
        # The pod in the runtime as this worker last read it, after its last change to it
        # (None: no such read), and when its last sync ended (trio time): see _runtime_status.
        self.last_read: PodRuntimeStatus | None = None
        self.synced_at = -math.inf
        # The sandboxes this worker has stopped: a finished pod is stopped once (kill_already_done).
        self.stopped_sandboxes: frozenset[str] = frozenset()
        self.start_slot = StartSlot(deps.pod_starts)  # held from RunPodSandbox through the starts
        self.mailbox: Mailbox | None = None  # the actor's, once it runs
        self.terminate_asked: TerminatePod | None = None  # read from the mailbox: stop the pod

    def record(self, pod: Pod | None, container: str | None, type: str, reason: str, message: str) -> None:
        if pod is not None:
            self.deps.events.record(pod_reference(pod, container), type, reason, message)

    @property
    def fields(self) -> dict[str, str]:
        return {"pod": self.pod.full_name if self.pod else "", "pod_uid": self.uid}

    async def run(self, ctx: ActorContext) -> None:
        assert ctx.mailbox is not None
        self.registry = ctx.registry
        self.mailbox = ctx.mailbox
        # At once with a spec, or a TerminatePod an earlier incarnation took; else wait.
        wake_at = -math.inf if self.pod is not None or self.terminate_asked is not None else math.inf
        retry = ExponentialBackoff(RETRY_INITIAL, RETRY_MAX, jitter=RETRY_JITTER)
        while True:
            with trio.move_on_at(wake_at):
                self._take(await self.mailbox.receive())
            self._drain()
            await self.deps.runtime.wait_connected()
            try:
                if self.terminate_asked is not None:
                    await self.terminate(self.terminate_asked)
                    return
                if self.pod is None:
                    wake_at = math.inf
                    continue
                wake_in = await self.sync()
                retry.reset()
                # Each worker resyncs on its own, with jitter, so that the pods of a node
                # do not all sync in the same second (Go: workerResyncIntervalJitterFactor).
                resync = jittered(self.deps.resync_period, RESYNC_JITTER)
                wake_in = resync if wake_in is None else min(wake_in, resync)
            except StartGivenUp:
                wake_in = 0  # at once: the TerminatePod or the eviction read while waiting
            except CriError as exc:
                wake_in = retry.next_delay()
                log.warning("pod sync failed, retrying in %.3gs: %s", wake_in, exc, extra=self.fields)
                # Seen at once in /pods, Pending; but not a pod that ran under an earlier
                # kubelet: the unread runtime would make its containers lost ones (BUG 7).
                if self.pod is not None and self.deps.statuses.get(self.uid) is None and not ran_before(self.pod):
                    self._publish(self.pod, PodRuntimeStatus(uid=self.uid, name="", namespace=""))
            wake_at = trio.current_time() + wake_in if wake_in is not None else math.inf

    # -- sync ----------------------------------------------------------------------

    def _creating(self) -> None:
        if self.deps.runtime_pods is not None:
            self.deps.runtime_pods.creating(self.uid)  # the PLEG's view no longer covers this pod

    async def sync(self) -> float | None:
        """One sync of the pod to its spec; seconds until the next one is due (back-off)."""
        assert self.pod is not None
        pod, deps = self.pod, self.deps
        operation = "create" if not self.synced_once else "update" if self.updated else "sync"
        started = time.perf_counter()
        cri = deps.runtime.client
        runtime = await self._runtime_status(pod)
        start_time = start_time_of(pod, deps.statuses.get(self.uid))
        exceeded = past_active_deadline(pod, time.time(), start_time)
        # An evicted pod is stopped for good, as one past its deadline.
        actions = compute_pod_actions(pod, runtime, active_deadline_exceeded=exceeded or self.eviction is not None)
        if not exceeded and self.eviction is None:
            actions = self._with_probe_kills(actions, runtime)
        # A finished pod already stopped: its kill below finds nothing to stop, no read after.
        changes_runtime = not actions.nothing_to_do and not kill_already_done(actions, runtime, self.stopped_sandboxes)
        self.waiting = {}
        self.created = ([], [])
        if deps.statuses.get(self.uid) is None:
            self._publish(pod, runtime)  # seen at once in /pods, Pending, before the work
        try:
            wake_in = await self._perform(pod, runtime, actions)
        finally:
            self.start_slot.leave()
            # Publish what is true now, also when a step failed half way.
            if changes_runtime:
                self.last_read = None  # the runtime changed: only a read made since may stand for it
                with contextlib.suppress(CriError):
                    if runtime.sandboxes or runtime.containers:
                        runtime = await read_pod_status(cri, self.uid, pod.metadata.name, pod.metadata.namespace)
                    else:  # the runtime held nothing of the pod: now it holds what this sync made
                        runtime = await read_created(cri, self.uid, pod.metadata.name, pod.metadata.namespace, *self.created)
                    self.last_read = runtime
            self._publish(pod, runtime)
            await self._tell_probes(pod, runtime)
            self.synced_at = trio.current_time()  # Go: lastSyncTime, after each sync, failed or not
        deps.metrics.pod_worker_duration.labels(operation).observe(time.perf_counter() - started)
        # A newer spec taken from the mailbox while the start waited (for a start slot, an
        # image: messages.py) is synced at once, as one left in the mailbox would be.
        newer = self.pod is not pod and self.pod != pod
        self.synced_once, self.updated = True, newer
        if newer:
            return 0.0
        # Wake at the pod's active deadline (Go: the activeDeadlineHandler's ShouldSync).
        remaining = active_deadline_remaining(pod, time.time(), start_time_of(pod, deps.statuses.get(self.uid)))
        if remaining:
            wake_in = remaining if wake_in is None else min(wake_in, remaining)
        return wake_in

    async def _runtime_status(self, pod: Pod) -> PodRuntimeStatus:
        """The pod in the runtime, for a sync to decide on. Read from the runtime, unless the
        PLEG's view makes the read needless (Go: the pod workers' GetNewerThan on the PLEG's
        pod cache): the runtime holds nothing of the pod, or the latest relist began after
        this worker's last sync ended and shows the pod as the worker last read it after
        its own last change. A sync right after the worker's own change therefore reads
        the runtime, as does one after the relist showed the pod changed (the PLEG keeps
        list data only; a changed pod is read afresh here, once, where Go's PLEG reads it)."""
        view, name, namespace = self.deps.runtime_pods, pod.metadata.name, pod.metadata.namespace
        if view is not None and view.holds_nothing_of(self.uid):
            self.last_read = PodRuntimeStatus(uid=self.uid, name=name, namespace=namespace)
        elif view is None or self.last_read is None or not view.unchanged_since(self.last_read, self.synced_at):
            self.last_read = await read_pod_status(self.deps.runtime.client, self.uid, name, namespace)
        return self.last_read

    async def _perform(self, pod: Pod, runtime: PodRuntimeStatus, actions: PodActions) -> float | None:
        cri = self.deps.runtime.client
        held = network_not_ready(pod, actions, self.deps.runtime.network_error, terminal=self._terminal(pod))
        if held is not None:
            return self._hold_for_network(pod, held)
        if self.network_held:
            self.network_held = False
            log.info("the pod network is ready: setting the pod up", extra=self.fields)
        grace = self._grace_period(pod) if self.eviction is None else self.eviction.grace_period_seconds
        if actions.kill_pod:
            await self._kill_pod(runtime, grace, remove=False)
            if not actions.create_sandbox:
                if self.eviction is not None or self._terminal(pod):
                    await self._release_volumes()  # an evicted pod's emptyDir gives its disk back
                return None  # the pod is done (or its init failed): nothing more to run
        if self._terminal(pod):
            await self._release_volumes()  # a finished pod keeps no secret mounted (Go: SyncTerminatedPod)
            return None
        await self._resize(pod, runtime, actions)
        running = any(s.state == "ready" for s in runtime.sandboxes) and self.setup is not None
        try:
            self.setup = await self._set_up_volumes(pod)
            self.mount_retry.reset()
        except (MountFailed, ObjectsNotReady) as exc:
            message = str(exc) if isinstance(exc, MountFailed) else f"Unable to attach or mount volumes: {exc}"
            log.warning("%s", message, extra=self.fields)
            self.record(pod, None, "Warning", events.FAILED_MOUNT_VOLUME, message)
            retry = self.mount_retry.next_delay()
            if not running:
                return retry  # nothing starts before its volumes are there
            # A running pod whose refresh failed goes on with what is mounted (Go: only
            # the first mount gates a pod); kills, restarts and probes carry on.
        wants_sandbox = actions.create_sandbox or actions.init_containers_to_start or actions.containers_to_start
        sandbox = None
        if wants_sandbox:
            try:
                dns, dns_warnings = sandbox_dns(pod, self.deps)
                sandbox = sandbox_config(
                    pod, attempt=actions.attempt, pod_logs_dir=self.deps.node.pod_logs_dir,
                    dns_config=dns, cluster_domain=self.deps.node.cluster_domain,
                )
            except (SandboxConfigError, PodHostnameError, SecurityContextError) as exc:
                message = f"Failed to create pod sandbox: {exc}"
                self.record(pod, None, "Warning", events.FAILED_CREATE_POD_SANDBOX, message)
                log.warning("%s", message, extra=self.fields)
                return RETRY_MAX
        sandbox_id = actions.sandbox_id
        if actions.create_sandbox:
            assert sandbox is not None
            for warning in dns_warnings:
                self.record(pod, None, "Warning", warning.reason, warning.message)
            if actions.attempt > 0:
                self.record(pod, None, "Normal", events.SANDBOX_CHANGED, "Pod sandbox changed, it will be killed and re-created.")
            if self.deps.containers is not None:
                try:
                    sandbox.linux.cgroup_parent = await self.deps.containers.ensure_pod(pod)
                except CgroupError as exc:
                    message = f"Failed to create pod sandbox: the pod's cgroup: {exc}"
                    self.record(pod, None, "Warning", events.FAILED_CREATE_POD_SANDBOX, message)
                    log.warning("%s", message, extra=self.fields)
                    return RETRY_MAX
            try:
                self._creating()
                await self._take_start_slot()
                sandbox_id = await cri.run_pod_sandbox(sandbox)
                self.created[0].append(sandbox_id)
            except CriError as exc:
                self.deps.metrics.started_pods_errors.inc()
                log.warning("creating the pod sandbox failed: %s", exc, extra=self.fields)
                self.record(pod, None, "Warning", events.FAILED_CREATE_POD_SANDBOX, f"Failed to create pod sandbox: {exc}")
                raise
            self.deps.metrics.started_pods.inc()
            log.log(V(2), "pod sandbox created", extra={**self.fields, "sandbox": sandbox_id})
        if actions.init_containers_to_start or actions.containers_to_start:
            starting = [
                *(pod.spec.init_containers[i] for i in actions.init_containers_to_start),
                *(pod.spec.containers[i] for i in actions.containers_to_start),
            ]
            await self._pod_network(pod, runtime, sandbox_id, starting, fresh=actions.create_sandbox)
        by_id = {c.id: c for c in runtime.containers}
        stops = []
        for kill in actions.containers_to_kill:
            log.log(V(2), "killing container: %s", kill.message, extra={**self.fields, "container": kill.name})
            if kill.container_id in by_id:
                own = kill.grace_period_seconds
                stops.append((by_id[kill.container_id], grace if own is None else own))
        await self._stop_together(stops)
        wake: list[float] = []
        for index in actions.init_containers_to_start:
            container = pod.spec.init_containers[index]
            retry_in = await self._start_container(pod, container, runtime, sandbox_id, sandbox, "init_container")
            if retry_in is not None:
                wake.append(retry_in)
            if container.name in self.waiting:
                break  # init containers start in order: a failed one holds back the rest
        for index in actions.containers_to_start:
            container = pod.spec.containers[index]
            retry_in = await self._start_container(pod, container, runtime, sandbox_id, sandbox, "container")
            if retry_in is not None:
                wake.append(retry_in)
        return min(wake) if wake else None

    def _hold_for_network(self, pod: Pod, message: str) -> float:
        """Go: SyncPod records NetworkNotReady and fails; the pod worker tries again after
        about a second (backOffOnTransientErrorPeriod, jittered), one event per try."""
        self.record(pod, None, "Warning", events.NETWORK_NOT_READY, message)
        if not self.network_held:
            self.network_held = True
            log.warning("%s", message, extra=self.fields)  # once per wait, not once per try
        return jittered(NETWORK_RETRY, RESYNC_JITTER)

    def _with_probe_kills(self, actions: PodActions, runtime: PodRuntimeStatus) -> PodActions:
        """Also kill the containers whose liveness or startup probe failed; they restart
        by the pod's restart policy (Go: computePodActions), each stopped with its probe's
        terminationGracePeriodSeconds where set."""
        running = running_containers(runtime)
        results = self.deps.probe_results
        failed = {
            **{n: "startup" for n in results.failed_startup(self.uid, running)},
            **{n: "liveness" for n in results.failed_liveness(self.uid, running)},  # liveness wins, as in Go
        }
        already = {k.container_id for k in actions.containers_to_kill}
        kills = [
            probe_kill(self.pod, running[name], name, kind)
            for name, kind in failed.items()
            if running[name] not in already
        ]
        if not kills:
            return actions
        return dataclasses.replace(actions, containers_to_kill=(*actions.containers_to_kill, *kills))

    def _host(self) -> str:
        """Where a hook's httpGet goes by default: the pod IP (the node's, for host network)."""
        status = self.deps.statuses.get(self.uid)
        return (status.pod_ip if status is not None and status.pod_ip else "") or self.deps.node.host_ip

