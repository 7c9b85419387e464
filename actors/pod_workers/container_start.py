"""A pod worker's container starts (Go: kuberuntime startContainer): back-off, the image,
the container's config with its environment, volumes and user resolved, CreateContainer
and StartContainer, the postStart hook. Part of PodWorker (worker.py), split out along the
seam between starting a pod and stopping it (termination.py).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence

import trio

from pykubelet.actors import events
from pykubelet.messages.cri_api import api_pb2
from pykubelet.messages.pod import Container, Pod
from pykubelet.pods.actions import MINIMUM_GRACE_PERIOD
from pykubelet.messages.runtime import PodRuntimeStatus
from pykubelet.pods.actions import restart_count_for
from pykubelet.pods.backoff import backoff_key, crash_loop_message, format_pod
from pykubelet.pods.env import ContainerConfigError
from pykubelet.pods.runtime_config import container_config
from pykubelet.pods.security_context import SecurityContextError, image_user, run_as_non_root_error
from pykubelet.ports.cri import CriError
from pykubelet.supervisor.verbosity import V

from . import termination_message
from .container_setup import PodSetup, container_inputs, pod_facts, read_objects, write_hosts_file
from .hooks import HookFailed, ports_by_name, run_hook
from .termination import ignore_gone
from .images import ImageProblem, ensure_image

log = logging.getLogger("pykubelet.podworker")

RETRY_MAX = 10.0  # seconds until a container whose config or creation failed is tried again
POST_START_TIMEOUT = 120.0  # Go gives postStart no deadline; a hung hook must not hold the worker forever


class ContainerStarts:
    """The start half of PodWorker; uses its deps, uid, waiting, created, setup, pod_ips,
    hosts_file, message_files, volumes, start_slot, record(), fields, _creating(),
    _grace_period(), _host() and _unless_stopped()."""

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
            lambda type, reason, message: self.record(pod, name, type, reason, message), deps.image_pulls,
            on_pull=self.start_slot.leave,  # a pull may take minutes: other pods start meanwhile
            waiting=self._unless_stopped,  # and the pod may be deleted meanwhile
        )
        if isinstance(image, ImageProblem):
            self.waiting[name] = (image.reason, image.message)
            log.warning("%s: %s", image.reason, image.message, extra={**self.fields, "container": name})
            return image.retry_in
        restart_count = restart_count_for(runtime, name)
        try:
            config = await self._container_config(pod, container, image, restart_count)
        except (ContainerConfigError, SecurityContextError) as exc:
            self.waiting[name] = ("CreateContainerConfigError", str(exc))
            self.record(pod, name, "Warning", events.FAILED_TO_CREATE_CONTAINER, f"Error: {exc}")
            log.warning("CreateContainerConfigError: %s", exc, extra={**self.fields, "container": name})
            return RETRY_MAX
        message_file = self.message_files.get((name, restart_count), "")
        if message_file == "":  # not made with the pod's /etc/hosts (_pod_network)
            message_file = await trio.to_thread.run_sync(
                termination_message.prepare, deps.node.root_dir, pod, container, restart_count
            )
        if message_file is not None:
            config.mounts.append(
                api_pb2.Mount(container_path=container.termination_message_path, host_path=message_file)
            )
        try:
            self._creating()
            container_id = await cri.create_container(sandbox_id, config, sandbox)
            self.created[1].append(container_id)
            self.applied[container_id] = _own_copy(config.linux.resources)
        except CriError as exc:
            return self._start_failed(pod, name, "CreateContainerError", exc, container_type)
        self.record(pod, name, "Normal", events.CREATED_CONTAINER, f"Created container {name}")
        try:
            await cri.start_container(container_id)
        except CriError as exc:
            return self._start_failed(pod, name, "RunContainerError", exc, container_type)
        self.record(pod, name, "Normal", events.STARTED_CONTAINER, f"Started container {name}")
        deps.metrics.started_containers.labels(container_type).inc()
        log.log(
            V(2),
            "container started",
            extra={**self.fields, "container": name, "container_id": container_id, "restart_count": restart_count},
        )
        if container.lifecycle is not None and container.lifecycle.post_start is not None:
            self.start_slot.leave()  # the hook runs as long as it needs: other pods start meanwhile
            return await self._post_start(pod, container, container_id)
        return None

    async def _post_start(self, pod: Pod, container: Container, container_id: str) -> float | None:
        """A failing postStart hook kills the container; it restarts per restartPolicy."""
        cri = self.deps.runtime.client
        try:
            await run_hook(
                cri, container.lifecycle.post_start, container_id,
                host=self._host(), ports=ports_by_name(container), timeout=POST_START_TIMEOUT,
            )
            return None
        except HookFailed as exc:
            message = f"PostStartHook failed: {exc}"
        log.warning("%s", message, extra={**self.fields, "container": container.name})
        self.record(pod, container.name, "Warning", events.FAILED_POST_START_HOOK, message)
        self.waiting[container.name] = ("PostStartHookError", message)
        await ignore_gone(cri.stop_container(container_id, max(self._grace_period(pod), MINIMUM_GRACE_PERIOD)))
        return None

    async def _set_up_volumes(self, pod: Pod) -> PodSetup:
        """The objects the pod reads and its volumes, ready before any container starts;
        refreshed at every sync, so that ConfigMap and Secret edits reach running pods."""
        objects, services = await read_objects(pod, self.deps)
        facts = pod_facts(pod, self.deps, self.pod_ips)
        paths = await self.volumes.set_up(pod, facts, objects)
        return PodSetup(facts=facts, objects=objects, services=services, volume_paths=paths)

    async def _release_volumes(self) -> None:
        """A finished pod's volumes are torn down and its objects and tokens forgotten
        (Go: SyncTerminatedPod); its termination messages stay until it is removed."""
        if self.volumes_released:
            return
        self.volumes_released = True
        await self.volumes.tear_down_volumes(self.uid)
        if self.deps.objects is not None:
            self.deps.objects.release(self.uid)

    async def _pod_network(
        self, pod: Pod, runtime: PodRuntimeStatus, sandbox_id: str, starting: Sequence[Container], *, fresh: bool
    ) -> None:
        """The pod's IPs (the node's for host network) and its /etc/hosts, before its
        containers are created (Go reads the new sandbox's status for them); in the same
        thread, the termination message files of the containers `starting` (see
        self.message_files)."""
        if pod.spec.host_network:
            ips = [self.deps.node.host_ip]
        elif not fresh and runtime.ip:
            ips = [runtime.ip]
        else:
            answer = await self.deps.runtime.client.pod_sandbox_status(sandbox_id)
            network = answer.status.network
            ips = [ip for ip in (network.ip, *(a.ip for a in network.additional_ips)) if ip]
        self.pod_ips = ips
        if self.setup is not None:
            self.setup.facts = pod_facts(pod, self.deps, ips)
        attempts = [(c, restart_count_for(runtime, c.name)) for c in starting]
        root_dir = self.deps.node.root_dir

        def write() -> tuple[str | OSError, dict[tuple[str, int], str | None]]:
            # Files on the node's disk, off the event loop: a mkdir on a disk busy with the
            # runtime's snapshots can take milliseconds, and would hold every pod's worker.
            # One thread for all: each hand-off costs a wake-up, and on a loaded node a
            # wake-up waits for a CPU. A message file made for an attempt that does not
            # happen (back-off, a failed image) is empty, and the next attempt truncates it.
            try:
                hosts: str | OSError = write_hosts_file(pod, self.deps, ips)
            except OSError as exc:
                hosts = exc
            files = {(c.name, n): termination_message.prepare(root_dir, pod, c, n) for c, n in attempts}
            return hosts, files

        hosts, self.message_files = await trio.to_thread.run_sync(write)
        if isinstance(hosts, OSError):
            self.hosts_file = None  # each container start then fails, naming why
            self.hosts_error = f"kubelet-managed /etc/hosts: {hosts.strerror or hosts}"
        else:
            self.hosts_file, self.hosts_error = hosts, None

    async def _container_config(self, pod: Pod, container: Container, image: str, restart_count: int):
        """The CRI config of one container: its environment and mounts resolved, its user
        checked against the image's (runAsNonRoot)."""
        setup = self.setup or PodSetup(facts=pod_facts(pod, self.deps, self.pod_ips))
        if self.hosts_error:
            raise ContainerConfigError(self.hosts_error)
        inputs = container_inputs(pod, container, setup, hosts_file=self.hosts_file, pod_ips=self.pod_ips)
        sc = container.security_context
        pod_sc = pod.spec.security_context
        if (sc is not None and sc.run_as_non_root) or (pod_sc is not None and pod_sc.run_as_non_root):
            status = await self.deps.runtime.client.image_status(image)
            uid, username = image_user(status.image if status.HasField("image") else None)
            if (error := run_as_non_root_error(pod, container, image_uid=uid, image_username=username)) is not None:
                raise ContainerConfigError(error)
        config = container_config(
            pod, inputs.container, image_ref=image, restart_count=restart_count,
            volume_paths=setup.volume_paths, env=inputs.env, command=inputs.command, args=inputs.args,
            extra_mounts=inputs.extra_mounts, seccomp_profile_root=os.path.join(self.deps.node.root_dir, "seccomp"),
        )
        if self.deps.containers is not None:
            config.linux.resources.CopyFrom(self.deps.containers.container_resources(pod, container))
        return config

    def _terminal(self, pod: Pod) -> bool:
        status = self.deps.statuses.get(self.uid)
        return status is not None and status.phase in ("Succeeded", "Failed")

    def _start_failed(self, pod: Pod, name: str, reason: str, exc: CriError, container_type: str) -> float:
        self.waiting[name] = (reason, str(exc))
        self.record(pod, name, "Warning", events.FAILED_TO_START_CONTAINER, f"Error: {exc}")
        self.deps.metrics.started_containers_errors.labels(exc.code or "Unknown", container_type).inc()
        log.warning("%s: %s", reason, exc, extra={**self.fields, "container": name})
        return RETRY_MAX


def _own_copy(resources: api_pb2.LinuxContainerResources) -> api_pb2.LinuxContainerResources:
    """The resources as a message of their own. A field of a message shares its whole tree's
    memory (upb: one arena a message tree): kept for the container's life, the field kept the
    CreateContainer request with it, about 5 kB a container (docs/performance.md)."""
    copy = api_pb2.LinuxContainerResources()
    copy.CopyFrom(resources)
    return copy
