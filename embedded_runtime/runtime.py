"""EmbeddedRuntime: the pod sandboxes and containers of the embedded runtime, and what each
CRI RuntimeService call does to them. The gRPC servicers (service.py) call it; it keeps
every change in the state store and announces it to GetContainerEvents subscribers.

A sandbox is only a record (there is no pause process and no network namespace). A
container is a host process in a session of its own, started from `command` + `args`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import secrets
import shutil
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import grpc
from cri_api.v1 import api_pb2

from . import filters, statuses
from .container_process import ContainerProcess
from .processes import (
    ExecTimedOut,
    ProcessIdentity,
    container_environment,
    exec_sync,
    is_running,
)
from .records import (
    CREATED,
    EXITED,
    RUNNING,
    SANDBOX_NOTREADY,
    SANDBOX_READY,
    ContainerRecord,
    SandboxRecord,
    StateStore,
    config_from_json,
    config_to_json,
)
from .statuses import ContainerView, SandboxView

log = logging.getLogger("pykubelet.embedded_runtime")

EVENT_BUFFER = 1000  # events queued per GetContainerEvents subscriber before dropping


class CriFault(Exception):
    """A CRI call fails with this gRPC status code and message."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _not_found(kind: str, ident: str) -> CriFault:
    return CriFault(grpc.StatusCode.NOT_FOUND, f"{kind} {ident!r} not found")


@dataclass
class Container(ContainerView):
    process: ContainerProcess | None = None  # from StartContainer (or adoption) on

    @property
    def name(self) -> str:
        return self.config.metadata.name


def _exec_failure(error: OSError, executable: str) -> str:
    """Why an executable did not start, in runc's words where it has them."""
    if isinstance(error, FileNotFoundError) and "/" not in executable:
        return "executable file not found in $PATH"
    return (error.strerror or str(error)).lower()


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def _sandbox_name(metadata: api_pb2.PodSandboxMetadata) -> str:
    return f"{metadata.name}_{metadata.namespace}_{metadata.uid}_{metadata.attempt}"


def _container_name(metadata: api_pb2.ContainerMetadata, sandbox: api_pb2.PodSandboxMetadata) -> str:
    return "_".join(
        [metadata.name, sandbox.name, sandbox.namespace, sandbox.uid, str(metadata.attempt)]
    )


class EmbeddedRuntime:
    def __init__(self, runtime_dir: str | os.PathLike[str]) -> None:
        self.runtime_dir = Path(runtime_dir)
        self.store = StateStore(self.runtime_dir / "state")
        self.io_dir = self.runtime_dir / "io"
        self.boot_id = _boot_id()
        self.sandboxes: dict[str, SandboxView] = {}
        self.containers: dict[str, Container] = {}
        self._names: dict[str, str] = {}  # reserved sandbox and container names -> id
        self._subscribers: set[asyncio.Queue[api_pb2.ContainerEventResponse]] = set()

    # -- start-up: what an earlier runtime process left ------------------------------------

    def recover(self) -> None:
        """Load the records; adopt containers whose process still runs; a container whose
        process ended while no runtime watched is EXITED with its exit code unknown."""
        for record in self.store.load_sandboxes():
            config = config_from_json(record.config, api_pb2.PodSandboxConfig())
            if record.state == SANDBOX_READY and record.boot_id != self.boot_id:
                record.state = SANDBOX_NOTREADY  # the machine rebooted since
                self.store.save_sandbox(record)
            self.sandboxes[record.id] = SandboxView(record, config)
            self._names[_sandbox_name(config.metadata)] = record.id
        for record in self.store.load_containers():
            config = config_from_json(record.config, api_pb2.ContainerConfig())
            if record.pod_sandbox_id not in self.sandboxes:
                log.warning("container %s: its sandbox %s is gone; dropping its record",
                            record.id, record.pod_sandbox_id)
                self.store.delete_container(record.id)
                continue
            container = Container(record, config)
            self.containers[record.id] = container
            sandbox = self.sandboxes[record.pod_sandbox_id].config.metadata
            self._names[_container_name(config.metadata, sandbox)] = record.id
            if record.state == RUNNING:
                self._adopt(container)

    def _adopt(self, container: Container) -> None:
        record = container.record
        identity = ProcessIdentity(record.pid, record.pid_start_time)
        if not is_running(identity):
            self._mark_exited(container, time.time_ns(), statuses.UNKNOWN_EXIT_CODE,
                              statuses.REASON_UNKNOWN, statuses.EXIT_CODE_LOST)
            return
        log.info("container %s (%s): adopted running process %d", container.name, record.id, record.pid)
        container.process = self._process_of(container)
        container.process.adopt(identity)

    # -- events ----------------------------------------------------------------------------

    async def events(self) -> AsyncIterator[api_pb2.ContainerEventResponse]:
        queue: asyncio.Queue[api_pb2.ContainerEventResponse] = asyncio.Queue(EVENT_BUFFER)
        self._subscribers.add(queue)
        try:
            while True:
                yield await queue.get()
        finally:
            self._subscribers.discard(queue)

    def _emit(self, container_id: str, sandbox_id: str, kind: int) -> None:
        if not self._subscribers:
            return
        sandbox = self.sandboxes.get(sandbox_id)
        event = api_pb2.ContainerEventResponse(
            container_id=container_id,
            container_event_type=kind,
            created_at=time.time_ns(),
            pod_sandbox_status=statuses.pod_sandbox_status(sandbox) if sandbox else None,
            containers_statuses=[
                statuses.container_status(c) for c in self._containers_of(sandbox_id)
            ],
        )
        for queue in self._subscribers:
            try:
                queue.put_nowait(event)
            except asyncio.QueueFull:
                log.warning("GetContainerEvents subscriber is %d events behind; dropping one", EVENT_BUFFER)

    def _containers_of(self, sandbox_id: str) -> list[Container]:
        return [c for c in self.containers.values() if c.record.pod_sandbox_id == sandbox_id]

    # -- pod sandboxes ---------------------------------------------------------------------

    def run_pod_sandbox(self, config: api_pb2.PodSandboxConfig, runtime_handler: str) -> str:
        if not config.HasField("metadata") or not config.metadata.name:
            raise CriFault(grpc.StatusCode.INVALID_ARGUMENT, "sandbox config must include metadata.name")
        name = _sandbox_name(config.metadata)
        if name in self._names:
            raise CriFault(grpc.StatusCode.ALREADY_EXISTS, f"failed to reserve sandbox name "
                           f"{name!r}: name is reserved for {self._names[name]!r}")
        if config.linux.security_context.namespace_options.network != api_pb2.NODE:
            log.info("sandbox %s asks for a pod network; the embedded runtime has the host "
                     "network only and reports %s", name, statuses.SANDBOX_IP)
        sandbox_id = secrets.token_hex(32)
        record = SandboxRecord(
            id=sandbox_id, config=config_to_json(config), created_at=time.time_ns(),
            runtime_handler=runtime_handler, boot_id=self.boot_id,
        )
        self.store.save_sandbox(record)
        self.sandboxes[sandbox_id] = SandboxView(record, config)
        self._names[name] = sandbox_id
        log.info("sandbox %s (%s) ready", name, sandbox_id)
        # As containerd: a sandbox's events carry its own id as the container id.
        self._emit(sandbox_id, sandbox_id, api_pb2.CONTAINER_CREATED_EVENT)
        return sandbox_id

    def find_sandbox(self, sandbox_id: str) -> SandboxView:
        sandbox = self.sandboxes.get(sandbox_id) or self.sandboxes.get(
            filters.resolve_id(sandbox_id, self.sandboxes) or ""
        )
        if sandbox is None:
            raise _not_found("sandbox", sandbox_id)
        return sandbox

    async def stop_pod_sandbox(self, sandbox_id: str) -> None:
        sandbox = self.find_sandbox(sandbox_id)
        # CRI expects the kubelet to have stopped the containers already: no grace left.
        await asyncio.gather(*(self._stop(c, 0) for c in self._containers_of(sandbox.record.id)))
        if sandbox.record.state != SANDBOX_NOTREADY:
            sandbox.record.state = SANDBOX_NOTREADY
            self.store.save_sandbox(sandbox.record)
            log.info("sandbox %s (%s) stopped", sandbox.config.metadata.name, sandbox.record.id)
            self._emit(sandbox.record.id, sandbox.record.id, api_pb2.CONTAINER_STOPPED_EVENT)

    async def remove_pod_sandbox(self, sandbox_id: str) -> None:
        try:
            sandbox = self.find_sandbox(sandbox_id)
        except CriFault:
            return  # removing what is not there succeeds, as with containerd
        await self.stop_pod_sandbox(sandbox.record.id)
        for container in self._containers_of(sandbox.record.id):
            await self.remove_container(container.record.id)
        self.store.delete_sandbox(sandbox.record.id)
        del self.sandboxes[sandbox.record.id]
        self._names.pop(_sandbox_name(sandbox.config.metadata), None)
        log.info("sandbox %s (%s) removed", sandbox.config.metadata.name, sandbox.record.id)
        self._emit(sandbox.record.id, sandbox.record.id, api_pb2.CONTAINER_DELETED_EVENT)

    def pod_sandbox_status(self, sandbox_id: str, verbose: bool) -> api_pb2.PodSandboxStatusResponse:
        sandbox = self.find_sandbox(sandbox_id)
        info = {}
        if verbose:
            info["info"] = json.dumps({
                "runtime": "pykubelet-embedded", "config": sandbox.record.config,
                "network": "host", "note": "no pause process, no namespaces",
            })
        return api_pb2.PodSandboxStatusResponse(
            status=statuses.pod_sandbox_status(sandbox), info=info, timestamp=time.time_ns()
        )

    def list_pod_sandbox(self, flt: api_pb2.PodSandboxFilter | None) -> list[api_pb2.PodSandbox]:
        return filters.filter_sandboxes([statuses.pod_sandbox(s) for s in self.sandboxes.values()], flt)

    # -- containers ------------------------------------------------------------------------

    def create_container(self, sandbox_id: str, config: api_pb2.ContainerConfig) -> str:
        sandbox = self.find_sandbox(sandbox_id)
        if not config.HasField("metadata") or not config.metadata.name:
            raise CriFault(grpc.StatusCode.INVALID_ARGUMENT, "container config must include metadata.name")
        if not config.command:
            raise CriFault(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"embedded runtime runs no images: container {config.metadata.name} needs an "
                "explicit command (set command in the pod spec: the image's entrypoint is not "
                "known here)",
            )
        if sandbox.record.state != SANDBOX_READY:
            raise CriFault(grpc.StatusCode.FAILED_PRECONDITION,
                           f"sandbox {sandbox.record.id!r} is not ready: cannot create a container in it")
        name = _container_name(config.metadata, sandbox.config.metadata)
        if name in self._names:
            raise CriFault(grpc.StatusCode.ALREADY_EXISTS, f"failed to reserve container name "
                           f"{name!r}: name is reserved for {self._names[name]!r}")
        log_path = ""
        if config.log_path:
            log_path = os.path.join(sandbox.config.log_directory, config.log_path)
            if not os.path.isabs(log_path):
                log.warning("container %s: log path %r is not absolute; its output is discarded",
                            name, log_path)
                log_path = ""
        container_id = secrets.token_hex(32)
        record = ContainerRecord(
            id=container_id, pod_sandbox_id=sandbox.record.id, config=config_to_json(config),
            created_at=time.time_ns(), log_path=log_path,
        )
        self.store.save_container(record)
        self.containers[container_id] = Container(record, config)
        self._names[name] = container_id
        log.info("container %s (%s) created in sandbox %s", config.metadata.name, container_id,
                 sandbox.record.id)
        self._emit(container_id, sandbox.record.id, api_pb2.CONTAINER_CREATED_EVENT)
        return container_id

    def find_container(self, container_id: str) -> Container:
        container = self.containers.get(container_id) or self.containers.get(
            filters.resolve_id(container_id, self.containers) or ""
        )
        if container is None:
            raise _not_found("container", container_id)
        return container

    def _cwd(self, container: Container) -> str:
        working_dir = container.config.working_dir
        return working_dir if working_dir and os.path.isdir(working_dir) else "/"

    def _env(self, container: Container) -> dict[str, str]:
        return container_environment([(kv.key, kv.value) for kv in container.config.envs])

    def start_container(self, container_id: str) -> None:
        container = self.find_container(container_id)
        record = container.record
        if record.state != CREATED:
            raise CriFault(grpc.StatusCode.FAILED_PRECONDITION,
                           f"container {record.id!r} is in {record.state} state")
        try:
            self._start(container)
        except CriFault as fault:
            # As containerd: a container that failed to start is EXITED, code 128, StartError.
            self._mark_exited(container, time.time_ns(), statuses.START_ERROR_EXIT_CODE,
                              statuses.REASON_START_ERROR, fault.message)
            raise

    def _start(self, container: Container) -> None:
        record = container.record
        if self.sandboxes[record.pod_sandbox_id].record.state != SANDBOX_READY:
            raise CriFault(grpc.StatusCode.FAILED_PRECONDITION,
                           f"sandbox {record.pod_sandbox_id!r} is not ready")
        argv = [*container.config.command, *container.config.args]
        if container.config.working_dir and not os.path.isdir(container.config.working_dir):
            log.warning("container %s: working dir %s does not exist on this host; using /",
                        container.name, container.config.working_dir)
        process = self._process_of(container)
        try:
            identity = process.start(argv, self._env(container), self._cwd(container))
        except OSError as error:
            raise CriFault(
                grpc.StatusCode.UNKNOWN,
                f"failed to start container {container.name!r} ({record.id}): exec: "
                f"{argv[0]!r}: {_exec_failure(error, argv[0])}",
            ) from None
        container.process = process
        record.pid, record.pid_start_time = identity.pid, identity.start_time
        record.state, record.started_at = RUNNING, time.time_ns()
        self.store.save_container(record)
        log.info("container %s (%s) started: pid %d", container.name, record.id, record.pid)
        self._emit(record.id, record.pod_sandbox_id, api_pb2.CONTAINER_STARTED_EVENT)

    def _process_of(self, container: Container) -> ContainerProcess:
        def exited(finished_at: int, exit_code: int, reason: str, message: str) -> None:
            self._mark_exited(container, finished_at, exit_code, reason, message)

        return ContainerProcess(self.io_dir / container.record.id, container.record.log_path, exited)

    def _mark_exited(self, container: Container, finished_at: int, exit_code: int,
                     reason: str, message: str) -> None:
        record = container.record
        record.state, record.finished_at = EXITED, finished_at
        record.exit_code, record.reason, record.message = exit_code, reason, message
        record.pid = record.pid_start_time = 0
        if container.record.id in self.containers:
            self.store.save_container(record)
        log.info("container %s (%s) exited: code %d (%s)", container.name, record.id, exit_code, reason)
        self._emit(record.id, record.pod_sandbox_id, api_pb2.CONTAINER_STOPPED_EVENT)

    async def stop_container(self, container_id: str, timeout: int) -> None:
        await self._stop(self.find_container(container_id), timeout)

    async def _stop(self, container: Container, timeout: float) -> None:
        """TERM to the container's process group, KILL after `timeout` seconds; returns
        once the container is EXITED. A container not running is left as it is."""
        if container.record.state == RUNNING and container.process is not None:
            await container.process.stop(timeout)

    async def remove_container(self, container_id: str) -> None:
        try:
            container = self.find_container(container_id)
        except CriFault:
            return  # removing what is not there succeeds, as with containerd
        await self._stop(container, 0)  # containerd stops a running container forcibly
        record = container.record
        self.store.delete_container(record.id)
        self.containers.pop(record.id, None)
        sandbox = self.sandboxes.get(record.pod_sandbox_id)
        if sandbox is not None:
            self._names.pop(_container_name(container.config.metadata, sandbox.config.metadata), None)
        shutil.rmtree(self.io_dir / record.id, ignore_errors=True)  # the log stays, as with containerd
        log.info("container %s (%s) removed", container.name, record.id)
        self._emit(record.id, record.pod_sandbox_id, api_pb2.CONTAINER_DELETED_EVENT)

    def container_status(self, container_id: str, verbose: bool) -> api_pb2.ContainerStatusResponse:
        container = self.find_container(container_id)
        info = {}
        if verbose:
            info["info"] = json.dumps({
                "sandboxID": container.record.pod_sandbox_id, "pid": container.record.pid,
                "runtimeType": "pykubelet-embedded", "config": container.record.config,
            })
        return api_pb2.ContainerStatusResponse(status=statuses.container_status(container), info=info)

    def list_containers(self, flt: api_pb2.ContainerFilter | None) -> list[api_pb2.Container]:
        items = [statuses.container(c) for c in self.containers.values()]
        return filters.filter_containers(items, flt, self.sandboxes)

    async def exec_sync(self, container_id: str, cmd: list[str], timeout: int) -> api_pb2.ExecSyncResponse:
        container = self.find_container(container_id)
        if container.record.state != RUNNING:
            raise CriFault(grpc.StatusCode.FAILED_PRECONDITION,
                           f"container {container.record.id!r} is in {container.record.state} state")
        if not cmd:
            raise CriFault(grpc.StatusCode.INVALID_ARGUMENT, "ExecSync needs a command")
        try:
            stdout, stderr, exit_code = await exec_sync(
                cmd, self._env(container), self._cwd(container), timeout if timeout > 0 else None
            )
        except ExecTimedOut:
            raise CriFault(grpc.StatusCode.DEADLINE_EXCEEDED,
                           f"timeout {timeout}s exceeded: context deadline exceeded") from None
        except OSError as error:
            raise CriFault(grpc.StatusCode.UNKNOWN,
                           f"failed to exec in container {container.record.id!r}: exec: {cmd[0]!r}: "
                           f"{error.strerror or error}") from None
        return api_pb2.ExecSyncResponse(stdout=stdout, stderr=stderr, exit_code=exit_code)

    def reopen_container_log(self, container_id: str) -> None:
        container = self.find_container(container_id)
        if container.record.state != RUNNING or container.process is None:
            raise CriFault(grpc.StatusCode.FAILED_PRECONDITION,
                           f"container {container.record.id!r} is not running")
        container.process.reopen_log()

    def image_names(self) -> list[str]:
        """The images named by known containers, each once, in creation order."""
        names = (c.config.image.image for c in self.containers.values())
        return list(dict.fromkeys(name for name in names if name))
