"""A pod worker's stops (Go: TerminatingPod, killPodWithSyncResult): every container
stopped with its grace period after its preStop hook, sidecars last, then the sandboxes;
on termination everything removed from the runtime and the pod's volumes torn down. Part
of PodWorker (worker.py).
"""

from __future__ import annotations

import logging

import trio

from pykubelet.actors import events
from pykubelet.messages.pod import Container, Pod
from pykubelet.pods.actions import DEFAULT_GRACE_PERIOD, LIVE_STATES, MINIMUM_GRACE_PERIOD
from pykubelet.messages.pod_status_reports import PodTerminated
from pykubelet.messages.pod_updates import TerminatePod
from pykubelet.messages.runtime import ContainerRuntimeStatus, PodRuntimeStatus
from pykubelet.pods.manifest import CONFIG_SOURCE
from pykubelet.ports.cgroups import CgroupError
from pykubelet.ports.cri import CriError, CriNotFound
from pykubelet.ports.cri.pods import read_pod_status
from pykubelet.supervisor.verbosity import V

from .hooks import HookFailed, ports_by_name, prestop_handler, run_hook

log = logging.getLogger("pykubelet.podworker")



class PodTermination:
    """The stop half of PodWorker; uses its deps, uid, pod, registry, volumes, record(),
    fields, _tell_probes() and _host(), and keeps its stopped_sandboxes."""

    def _grace_period(self, pod: Pod | None, runtime: PodRuntimeStatus | None = None) -> int:
        grace = pod.spec.termination_grace_period_seconds if pod is not None else None
        if grace is None and runtime is not None:
            grace = next((c.grace_period for c in runtime.containers if c.grace_period is not None), None)
        return max(grace if grace is not None else DEFAULT_GRACE_PERIOD, MINIMUM_GRACE_PERIOD)

    async def terminate(self, message: TerminatePod) -> None:
        cri = self.deps.runtime.client
        name = self.pod.metadata.name if self.pod else message.name
        namespace = self.pod.metadata.namespace if self.pod else message.namespace
        runtime = await read_pod_status(cri, self.uid, name, namespace)
        grace = message.grace_period_seconds
        if grace is None:
            grace = self._grace_period(self.pod, runtime)
        log.log(
            V(2),
            "terminating pod (%s), grace period %ds",
            message.reason or "removed",
            grace,
            extra={**self.fields, "pod": self.pod.full_name if self.pod else f"{runtime.namespace}/{runtime.name}"},
        )
        await self._tell_probes(None, None)  # no liveness kill during a graceful stop
        await self._kill_pod(runtime, grace, remove=True)
        await self.volumes.tear_down(self.uid)
        if self.deps.containers is not None:
            try:
                await self.deps.containers.destroy_pod(self.uid)
            except CgroupError as exc:  # GC removes it later, as an orphan
                log.warning("pod cgroup not removed: %s", exc, extra=self.fields)
        if self.deps.objects is not None:
            self.deps.objects.release(self.uid)
        self.deps.statuses.remove(self.uid)
        source = self.pod.metadata.annotations.get(CONFIG_SOURCE) if self.pod else None
        if self.registry is not None and source in (None, "api") and self.deps.status_manager in self.registry:
            # The status manager may now delete the API object of a pod being deleted: the
            # board keeps that until it has (its own incarnation may crash meanwhile), the
            # message wakes it at once.
            self.deps.statuses.terminate(self.uid, runtime.namespace, runtime.name)
            await self.registry.lookup(self.deps.status_manager).send(
                PodTerminated(pod_uid=self.uid, namespace=runtime.namespace, name=runtime.name)
            )

    async def _kill_pod(self, runtime: PodRuntimeStatus, grace: int, *, remove: bool) -> None:
        """Stop every container (in parallel, each with the grace period), then the
        sandboxes; with `remove`, remove them all from the runtime too."""
        cri = self.deps.runtime.client
        live = [c for c in runtime.containers if c.state in LIVE_STATES]
        sidecars = self._sidecar_names()
        # Regular containers first, together; then sidecars one by one in reverse order,
        # so that they serve the main containers until those are gone (as the Go kubelet).
        await self._stop_together([(c, grace) for c in live if c.name not in sidecars])
        for name in reversed(sidecars):
            for container in live:
                if container.name == name:
                    await self._stop_container(container, grace)
        for sandbox in runtime.sandboxes:
            if sandbox.state != "ready" and sandbox.id in self.stopped_sandboxes:
                continue  # stopped by this worker before: its network is down already
            await ignore_gone(cri.stop_pod_sandbox(sandbox.id))
            self.stopped_sandboxes |= {sandbox.id}
        if remove:
            for container in runtime.containers:
                await ignore_gone(cri.remove_container(container.id))
                self.deps.prestop_done.discard(container.id)
            for sandbox in runtime.sandboxes:
                await ignore_gone(cri.remove_pod_sandbox(sandbox.id))

    async def _stop_together(self, stops: list[tuple[ContainerRuntimeStatus, int]]) -> None:
        """Stop these containers in parallel. A stop the runtime fails (a timeout, the runtime
        gone) does not cut the others short; the first failure is raised after all have
        ended, as a plain CriError, so that the worker retries the whole step with back-off
        (a group of errors would crash the worker and lose a TerminatePod)."""
        if not stops:
            return  # most syncs: no nursery to open
        failures: list[CriError] = []

        async def stop(container: ContainerRuntimeStatus, grace: int) -> None:
            try:
                await self._stop_container(container, grace)
            except CriError as exc:
                failures.append(exc)

        async with trio.open_nursery() as nursery:
            for container, grace in stops:
                nursery.start_soon(stop, container, grace)
        if failures:
            raise failures[0]

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
                    cri, handler, container.id, host=self._host(), ports=ports_by_name(spec), timeout=grace
                )
            except HookFailed as exc:
                log.warning("preStop hook failed: %s", exc, extra={**self.fields, "container": container.name})
                self.record(self.pod, container.name, "Warning", events.FAILED_PRE_STOP_HOOK, f"PreStopHook failed: {exc}")
        remaining = grace - int(trio.current_time() - started)
        await ignore_gone(cri.stop_container(container.id, max(remaining, MINIMUM_GRACE_PERIOD)))

    def _sidecar_names(self) -> list[str]:
        """Init containers with restartPolicy Always, in spec order."""
        if self.pod is None:
            return []
        return [c.name for c in self.pod.spec.init_containers if c.restart_policy == "Always"]

    def _container_spec(self, name: str) -> Container | None:
        if self.pod is None:
            return None
        return next((c for c in [*self.pod.spec.init_containers, *self.pod.spec.containers] if c.name == name), None)


async def ignore_gone(call) -> None:
    """Await a CRI call on a container or sandbox that may be gone already."""
    try:
        await call
    except CriNotFound:
        pass
