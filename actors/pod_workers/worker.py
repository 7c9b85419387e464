"""The pod worker: one actor per pod UID that serialises that pod's syncs.

Each sync reads the pod's state from the runtime (unless the PLEG's view shows the runtime
holds nothing of the pod: see RuntimePods), asks compute_pod_actions what to do,
does it over CRI, and publishes the pod's status. Messages arriving during a sync are
coalesced: the newest spec wins, a TerminatePod sticks. A container in back-off makes the
worker wake itself when the back-off ends.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import os
import random
import time

import trio
from cri_api.v1 import api_pb2

from pykubelet.actors import events
from pykubelet.actors.events import pod_reference
from pykubelet.messages.pod import Container, Pod, PodStatus
from pykubelet.messages.pod_updates import PodWorkerMessage, SyncPod, TerminatePod
from pykubelet.messages.probes import ProbeTargets
from pykubelet.pods.manifest import CONFIG_SOURCE
from pykubelet.messages.runtime import ContainerRuntimeStatus, PodRuntimeStatus
from pykubelet.pods.actions import ContainerToKill, PodActions, compute_pod_actions, restart_count_for
from pykubelet.pods.backoff import backoff_key, crash_loop_message, format_pod
from pykubelet.pods.runtime_config import container_config, sandbox_config
from pykubelet.pods.status import compute_pod_status, rfc3339
from pykubelet.ports.cri import CriError, CriNotFound
from pykubelet.ports.cri.pods import read_created, read_pod_status
from pykubelet.supervisor import ActorContext, MailboxFull, Registry, UnknownAddress

from pykubelet.messages.pod_status_reports import PodStatusChanged, PodTerminated

from .deps import PodWorkerDeps
from . import termination_message
from .hooks import HookFailed, prestop_handler, run_hook
from .images import ImageProblem, ensure_image

log = logging.getLogger("pykubelet.podworker")

DEFAULT_GRACE_PERIOD = 30
MINIMUM_GRACE_PERIOD = 2  # the Go kubelet never gives a container less to stop
RETRY_INITIAL, RETRY_MAX = 1.0, 10.0  # after a failed sync (runtime unavailable, ...)
RESYNC_JITTER = 0.5
POST_START_TIMEOUT = 120.0  # Go gives postStart no deadline; a hung hook must not hold the worker forever


def pod_worker_actor(uid: str, pod: Pod | None, deps: PodWorkerDeps):
    """The actor for pod `uid`; `pod` is its spec when created (None: an orphan found in the
    runtime, which only ever gets TerminatePod)."""

    async def run(ctx: ActorContext) -> None:
        await PodWorker(uid, pod, deps).run(ctx)

    return run


class PodWorker:
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

    def record(self, pod: Pod | None, container: str | None, type: str, reason: str, message: str) -> None:
        if pod is not None:
            self.deps.events.record(pod_reference(pod, container), type, reason, message)

    @property
    def fields(self) -> dict[str, str]:
        return {"pod": self.pod.full_name if self.pod else "", "pod_uid": self.uid}

    async def run(self, ctx: ActorContext) -> None:
        assert ctx.mailbox is not None
        self.registry = ctx.registry
        wake_at = -math.inf if self.pod is not None else math.inf  # sync at once if we have a spec
        retry = RETRY_INITIAL
        terminate: TerminatePod | None = None
        while True:
            with trio.move_on_at(wake_at):
                terminate = self._take(await ctx.mailbox.receive(), terminate)
            terminate = self._drain(ctx, terminate)
            await self.deps.runtime.wait_connected()
            try:
                if terminate is not None:
                    await self.terminate(terminate)
                    return
                if self.pod is None:
                    wake_at = math.inf
                    continue
                wake_in = await self.sync()
                retry = RETRY_INITIAL
                # Each worker resyncs on its own, with jitter, so that the pods of a node
                # do not all sync in the same second (Go: workerResyncIntervalJitterFactor).
                resync = self.deps.resync_period * (1 + RESYNC_JITTER * random.random())
                wake_in = resync if wake_in is None else min(wake_in, resync)
            except CriError as exc:
                log.warning("pod sync failed, retrying in %gs: %s", retry, exc, extra=self.fields)
                if self.pod is not None and self.deps.statuses.get(self.uid) is None:
                    self._publish(self.pod, PodRuntimeStatus(uid=self.uid, name="", namespace=""))
                wake_in, retry = retry, min(retry * 2, RETRY_MAX)
            wake_at = trio.current_time() + wake_in if wake_in is not None else math.inf

    def _take(self, message: PodWorkerMessage, terminate: TerminatePod | None) -> TerminatePod | None:
        if isinstance(message, TerminatePod):
            return message
        if isinstance(message, SyncPod):
            if self.pod is not None and message.pod != self.pod:
                self.updated = True
            self.pod = message.pod
        return terminate

    def _drain(self, ctx: ActorContext, terminate: TerminatePod | None) -> TerminatePod | None:
        while True:
            try:
                terminate = self._take(ctx.mailbox.receive_nowait(), terminate)
            except trio.WouldBlock:
                return terminate

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
        if deps.runtime_pods is not None and deps.runtime_pods.holds_nothing_of(self.uid):
            runtime = PodRuntimeStatus(uid=self.uid, name=pod.metadata.name, namespace=pod.metadata.namespace)
        else:
            runtime = await read_pod_status(cri, self.uid, pod.metadata.name, pod.metadata.namespace)
        actions = self._with_probe_kills(compute_pod_actions(pod, runtime), runtime)
        self.waiting = {}
        self.created = ([], [])
        if deps.statuses.get(self.uid) is None:
            self._publish(pod, runtime)  # seen at once in /pods, Pending, before the work
        try:
            wake_in = await self._perform(pod, runtime, actions)
        finally:
            # Publish what is true now, also when a step failed half way.
            if not actions.nothing_to_do:
                with contextlib.suppress(CriError):
                    if runtime.sandboxes or runtime.containers:
                        runtime = await read_pod_status(cri, self.uid, pod.metadata.name, pod.metadata.namespace)
                    else:  # the runtime held nothing of the pod: now it holds what this sync made
                        runtime = await read_created(cri, self.uid, pod.metadata.name, pod.metadata.namespace, *self.created)
            self._publish(pod, runtime)
            await self._tell_probes(pod, runtime)
        deps.metrics.pod_worker_duration.labels(operation).observe(time.perf_counter() - started)
        self.synced_once, self.updated = True, False
        return wake_in

    async def _perform(self, pod: Pod, runtime: PodRuntimeStatus, actions: PodActions) -> float | None:
        cri = self.deps.runtime.client
        grace = self._grace_period(pod)
        if actions.kill_pod:
            await self._kill_pod(runtime, grace, remove=False)
            if not actions.create_sandbox:
                return None  # the pod is done (or its init failed): nothing more to run
        sandbox = sandbox_config(pod, attempt=actions.attempt, pod_logs_dir=self.deps.node.pod_logs_dir)
        sandbox_id = actions.sandbox_id
        if actions.create_sandbox:
            if actions.attempt > 0:
                self.record(pod, None, "Normal", events.SANDBOX_CHANGED, "Pod sandbox changed, it will be killed and re-created.")
            try:
                self._creating()
                sandbox_id = await cri.run_pod_sandbox(sandbox)
                self.created[0].append(sandbox_id)
            except CriError as exc:
                self.deps.metrics.started_pods_errors.inc()
                log.warning("creating the pod sandbox failed: %s", exc, extra=self.fields)
                self.record(pod, None, "Warning", events.FAILED_CREATE_POD_SANDBOX, f"Failed to create pod sandbox: {exc}")
                raise
            self.deps.metrics.started_pods.inc()
            log.info("pod sandbox created", extra={**self.fields, "sandbox": sandbox_id})
        by_id = {c.id: c for c in runtime.containers}
        async with trio.open_nursery() as nursery:
            for kill in actions.containers_to_kill:
                log.info("killing container: %s", kill.message, extra={**self.fields, "container": kill.name})
                if kill.container_id in by_id:
                    nursery.start_soon(self._stop_container, by_id[kill.container_id], grace)
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

    async def _start_container(
        self,
        pod: Pod,
        container: Container,
        runtime: PodRuntimeStatus,
        sandbox_id: str,
        sandbox: api_pb2.PodSandboxConfig,
        container_type: str,
    ) -> float | None:
        """Start one container unless it is in back-off; seconds until a retry is due."""
        deps, name = self.deps, container.name
        latest = runtime.latest(name)
        if latest is not None and latest.state == "exited" and latest.finished_at is not None:
            key = backoff_key(pod, container)
            if deps.crash_backoff.in_backoff(key, latest.finished_at):
                self.waiting[name] = (
                    "CrashLoopBackOff",
                    crash_loop_message(deps.crash_backoff.delay(key), pod, name),
                )
                self.record(
                    pod, name, "Warning", events.BACK_OFF_START_CONTAINER,
                    f"Back-off restarting failed container {name} in pod {format_pod(pod)}",
                )
                return deps.crash_backoff.remaining(key, latest.finished_at)
            deps.crash_backoff.next(key, latest.finished_at)
        cri = deps.runtime.client
        image = await ensure_image(
            cri, pod, container, deps.image_backoff,
            lambda type, reason, message: self.record(pod, name, type, reason, message),
        )
        if isinstance(image, ImageProblem):
            self.waiting[name] = (image.reason, image.message)
            log.warning("%s: %s", image.reason, image.message, extra={**self.fields, "container": name})
            return image.retry_in
        restart_count = restart_count_for(runtime, name)
        config = container_config(
            pod, container, image_ref=image, restart_count=restart_count, volume_paths=self._volumes(pod)
        )
        message_file = termination_message.prepare(deps.node.root_dir, pod, container, restart_count)
        if message_file is not None:
            config.mounts.append(
                api_pb2.Mount(container_path=container.termination_message_path, host_path=message_file)
            )
        try:
            self._creating()
            container_id = await cri.create_container(sandbox_id, config, sandbox)
            self.created[1].append(container_id)
        except CriError as exc:
            return self._start_failed(pod, name, "CreateContainerError", exc, container_type)
        self.record(pod, name, "Normal", events.CREATED_CONTAINER, f"Created container {name}")
        try:
            await cri.start_container(container_id)
        except CriError as exc:
            return self._start_failed(pod, name, "RunContainerError", exc, container_type)
        self.record(pod, name, "Normal", events.STARTED_CONTAINER, f"Started container {name}")
        deps.metrics.started_containers.labels(container_type).inc()
        log.info(
            "container started",
            extra={**self.fields, "container": name, "container_id": container_id, "restart_count": restart_count},
        )
        if container.lifecycle is not None and container.lifecycle.post_start is not None:
            return await self._post_start(pod, container, container_id)
        return None

    async def _post_start(self, pod: Pod, container: Container, container_id: str) -> float | None:
        """A failing postStart hook kills the container; it restarts per restartPolicy."""
        cri = self.deps.runtime.client
        try:
            await run_hook(
                cri, container.lifecycle.post_start, container_id,
                host=self._host(), ports=_ports(container), timeout=POST_START_TIMEOUT,
            )
            return None
        except HookFailed as exc:
            message = f"PostStartHook failed: {exc}"
        log.warning("%s", message, extra={**self.fields, "container": container.name})
        self.record(pod, container.name, "Warning", events.FAILED_POST_START_HOOK, message)
        self.waiting[container.name] = ("PostStartHookError", message)
        await _ignore_gone(cri.stop_container(container_id, max(self._grace_period(pod), MINIMUM_GRACE_PERIOD)))
        return None

    def _with_probe_kills(self, actions: PodActions, runtime: PodRuntimeStatus) -> PodActions:
        """Also kill the containers whose liveness or startup probe failed; they restart
        by the pod's restart policy (Go: computePodActions)."""
        running = _running(runtime)
        results = self.deps.probe_results
        failed = {
            **{n: f"Container {n} failed startup probe, will be restarted" for n in results.failed_startup(self.uid, running)},
            **{n: f"Container {n} failed liveness probe, will be restarted" for n in results.failed_liveness(self.uid, running)},
        }
        already = {k.container_id for k in actions.containers_to_kill}
        kills = [
            ContainerToKill(container_id=running[name], name=name, message=message)
            for name, message in failed.items()
            if running[name] not in already
        ]
        if not kills:
            return actions
        return dataclasses.replace(actions, containers_to_kill=(*actions.containers_to_kill, *kills))

    async def _tell_probes(self, pod: Pod | None, runtime: PodRuntimeStatus | None) -> None:
        """The running containers, for the probe manager (None: stop every probe)."""
        targets = ProbeTargets(pod_uid=self.uid, pod=None)
        if pod is not None and runtime is not None:
            running = _running(runtime)
            started = {c.name: c.started_at or c.created_at for c in runtime.containers if c.id in running.values()}
            targets = ProbeTargets(pod_uid=self.uid, pod=pod, running=running, started_at=started)
        if self.registry is None:
            return  # driven outside a tree (tests): no probe manager to tell
        with contextlib.suppress(UnknownAddress, MailboxFull):
            self.registry.lookup(self.deps.probe_manager).send_nowait(targets)

    def _tell_status_manager(self, message: PodStatusChanged) -> None:
        """Cluster mode: the status manager writes a changed status at once rather than at
        its next poll. A full mailbox loses nothing: the board holds the status."""
        if self.registry is None or self.deps.status_manager not in self.registry:
            return
        with contextlib.suppress(UnknownAddress, MailboxFull):
            self.registry.lookup(self.deps.status_manager).send_nowait(message)

    def _start_failed(self, pod: Pod, name: str, reason: str, exc: CriError, container_type: str) -> float:
        self.waiting[name] = (reason, str(exc))
        self.record(pod, name, "Warning", events.FAILED_TO_START_CONTAINER, f"Error: {exc}")
        self.deps.metrics.started_containers_errors.labels(exc.code or "Unknown", container_type).inc()
        log.warning("%s: %s", reason, exc, extra={**self.fields, "container": name})
        return RETRY_MAX

    def _volumes(self, pod: Pod) -> dict[str, str]:
        """Host paths for the pod's hostPath and emptyDir volumes (emptyDirs are created)."""
        paths: dict[str, str] = {}
        for volume in pod.spec.volumes:
            if volume.host_path is not None:
                paths[volume.name] = volume.host_path.path
            elif volume.empty_dir is not None:
                path = os.path.join(
                    self.deps.node.root_dir, "pods", pod.metadata.uid, "volumes", "kubernetes.io~empty-dir", volume.name
                )
                os.makedirs(path, exist_ok=True)
                paths[volume.name] = path
        return paths

    def _publish(self, pod: Pod, runtime: PodRuntimeStatus) -> None:
        deps = self.deps
        previous = deps.statuses.get(self.uid)
        runtime = termination_message.with_messages(
            pod, runtime, root_dir=deps.node.root_dir, pod_logs_dir=deps.node.pod_logs_dir
        )
        running = _running(runtime)
        status: PodStatus = compute_pod_status(
            pod,
            runtime,
            waiting=self.waiting,
            runtime_name=deps.runtime.runtime_name,
            now=rfc3339(time.time()),
            host_ip=deps.node.host_ip,
            previous=previous,
            ready=deps.probe_results.ready(self.uid, running),
            started=deps.probe_results.started(self.uid, running),
        )
        deps.statuses.set(pod, status)
        if status != previous:
            self._tell_status_manager(PodStatusChanged(pod_uid=self.uid))
        if status.phase == "Running" and not self.running_reported:
            self.running_reported = True
            deps.metrics.pod_start_duration.observe(time.time() - self.first_seen)
        if previous is None or previous.phase != status.phase:
            log.info("pod phase %s", status.phase, extra=self.fields)

    # -- termination ---------------------------------------------------------------

    def _grace_period(self, pod: Pod | None, runtime: PodRuntimeStatus | None = None) -> int:
        grace = pod.spec.termination_grace_period_seconds if pod is not None else None
        if grace is None and runtime is not None:
            grace = next((c.grace_period for c in runtime.containers if c.grace_period is not None), None)
        return max(grace if grace is not None else DEFAULT_GRACE_PERIOD, MINIMUM_GRACE_PERIOD)

    async def terminate(self, message: TerminatePod) -> None:
        cri = self.deps.runtime.client
        name = self.pod.metadata.name if self.pod else ""
        namespace = self.pod.metadata.namespace if self.pod else ""
        runtime = await read_pod_status(cri, self.uid, name, namespace)
        grace = message.grace_period_seconds
        if grace is None:
            grace = self._grace_period(self.pod, runtime)
        log.info(
            "terminating pod (%s), grace period %ds",
            message.reason or "removed",
            grace,
            extra={**self.fields, "pod": self.pod.full_name if self.pod else f"{runtime.namespace}/{runtime.name}"},
        )
        await self._tell_probes(None, None)  # no liveness kill during a graceful stop
        await self._kill_pod(runtime, grace, remove=True)
        self.deps.statuses.remove(self.uid)
        source = self.pod.metadata.annotations.get(CONFIG_SOURCE) if self.pod else None
        if self.registry is not None and source in (None, "api") and self.deps.status_manager in self.registry:
            # The status manager may now delete the API object of a pod being deleted.
            await self.registry.lookup(self.deps.status_manager).send(
                PodTerminated(pod_uid=self.uid, namespace=runtime.namespace, name=runtime.name)
            )

    async def _kill_pod(self, runtime: PodRuntimeStatus, grace: int, *, remove: bool) -> None:
        """Stop every container (in parallel, each with the grace period), then the
        sandboxes; with `remove`, remove them all from the runtime too."""
        cri = self.deps.runtime.client
        live = [c for c in runtime.containers if c.state in ("running", "created", "unknown")]
        sidecars = self._sidecar_names()
        # Regular containers first, together; then sidecars one by one in reverse order,
        # so that they serve the main containers until those are gone (as the Go kubelet).
        async with trio.open_nursery() as nursery:
            for container in live:
                if container.name not in sidecars:
                    nursery.start_soon(self._stop_container, container, grace)
        for name in reversed(sidecars):
            for container in live:
                if container.name == name:
                    await self._stop_container(container, grace)
        for sandbox in runtime.sandboxes:
            await _ignore_gone(cri.stop_pod_sandbox(sandbox.id))
        if remove:
            for container in runtime.containers:
                await _ignore_gone(cri.remove_container(container.id))
                self.deps.prestop_done.discard(container.id)
            for sandbox in runtime.sandboxes:
                await _ignore_gone(cri.remove_pod_sandbox(sandbox.id))

    async def _stop_container(self, container: ContainerRuntimeStatus, grace: int) -> None:
        """Run the preStop hook (within the grace period), then StopContainer with what is
        left of the grace period (at least 2s): SIGTERM, then SIGKILL at the deadline."""
        cri = self.deps.runtime.client
        spec = self._container_spec(container.name)
        self.record(self.pod, container.name, "Normal", events.KILLING_CONTAINER, f"Stopping container {container.name}")
        handler = prestop_handler(spec, container.prestop_handler) if container.state == "running" else None
        if container.id in self.deps.prestop_done:
            handler = None  # a second stop of the same container (two terminations racing)
        elif handler is not None:
            self.deps.prestop_done.add(container.id)
        started = trio.current_time()
        if handler is not None:
            try:
                await run_hook(
                    cri, handler, container.id, host=self._host(), ports=_ports(spec), timeout=grace
                )
            except HookFailed as exc:
                log.warning("preStop hook failed: %s", exc, extra={**self.fields, "container": container.name})
                self.record(self.pod, container.name, "Warning", events.FAILED_PRE_STOP_HOOK, f"PreStopHook failed: {exc}")
        remaining = grace - int(trio.current_time() - started)
        await _ignore_gone(cri.stop_container(container.id, max(remaining, MINIMUM_GRACE_PERIOD)))

    def _sidecar_names(self) -> list[str]:
        """Init containers with restartPolicy Always, in spec order."""
        if self.pod is None:
            return []
        return [c.name for c in self.pod.spec.init_containers if c.restart_policy == "Always"]

    def _container_spec(self, name: str) -> Container | None:
        if self.pod is None:
            return None
        return next((c for c in [*self.pod.spec.init_containers, *self.pod.spec.containers] if c.name == name), None)

    def _host(self) -> str:
        """Where a hook's httpGet goes by default: the pod IP (the node's, for host network)."""
        status = self.deps.statuses.get(self.uid)
        return (status.pod_ip if status is not None and status.pod_ip else "") or self.deps.node.host_ip


def _running(runtime: PodRuntimeStatus) -> dict[str, str]:
    """Container name -> id of its running container."""
    return {c.name: c.id for c in reversed(runtime.containers) if c.state == "running"}


def _ports(container: Container | None) -> dict[str, int]:
    return {p.name: p.container_port for p in container.ports if p.name} if container is not None else {}


async def _ignore_gone(call) -> None:
    try:
        await call
    except CriNotFound:
        pass
