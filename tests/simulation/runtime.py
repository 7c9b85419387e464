"""A simulated CRI runtime in memory, on trio's virtual clock: the node's containers for the
deterministic simulation (tests/simulation).

SimRuntime is the node's runtime: it outlives any one daemon (as containerd outlives a
killed kubelet), keeps sandboxes and containers as CRI returns them (labels, annotations,
states, exit codes, times in Unix nanoseconds on the virtual wall clock) and the history
the invariants are checked against. SimCriClient is one daemon's connection to it and
offers the surface of ports/cri/client.py's CriClient; the runtime link makes one per
session, through the factory the harness puts in place of CriClient.

Faults: injected call errors (before or after the runtime acted), the runtime going away
for a while (UNAVAILABLE; containers survive, as with containerd), a stop that hangs
until the call's deadline, containers that ignore SIGTERM, exits forced by the schedule.
"""

from __future__ import annotations

import functools
import math
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Callable

import trio
from cri_api.v1 import api_pb2

from pykubelet.pods.labels import CONTAINER_NAME_LABEL, MANAGED_LABEL, POD_UID_LABEL
from pykubelet.ports.cri import (
    CriCallError,
    CriNotFound,
    EventsUnsupported,
    ExecSyncResult,
    RuntimeCondition,
    RuntimeStatus,
    RuntimeTimeout,
    RuntimeUnavailable,
    RuntimeVersion,
)

EPOCH = 1_700_000_000.0  # the virtual wall clock's origin (Unix seconds at trio time 0)
ENDPOINT = "unix:///sim/runtime.sock"
SIM_VERSION = RuntimeVersion(
    runtime_name="sim", runtime_version="1.0", runtime_api_version="v1", version="0.1.0"
)
IGNORE_TERM = "ignore-term"  # a container command word: SIGTERM is ignored, stop waits the grace period


def wall_time() -> float:
    """The virtual wall clock: Unix seconds, moving with trio's (mock) clock."""
    return EPOCH + trio.current_time()


def wall_ns() -> int:
    return int(round(wall_time() * 1e9))


@dataclass
class SimSandbox:
    id: str
    config: api_pb2.PodSandboxConfig
    created_at: int
    state: int = api_pb2.SANDBOX_READY

    @property
    def uid(self) -> str:
        return self.config.labels.get(POD_UID_LABEL, "")


@dataclass
class SimContainer:
    id: str
    sandbox_id: str
    config: api_pb2.ContainerConfig
    created_at: int
    state: int = api_pb2.CONTAINER_CREATED
    started_at: int = 0
    finished_at: int = 0
    exit_code: int = 0
    reason: str = ""
    ran: bool = False

    @property
    def uid(self) -> str:
        return self.config.labels.get(POD_UID_LABEL, "")

    @property
    def name(self) -> str:
        return self.config.labels.get(CONTAINER_NAME_LABEL, self.config.metadata.name)

    @property
    def ignores_term(self) -> bool:
        return IGNORE_TERM in (*self.config.command, *self.config.args)


@dataclass
class InjectedError:
    operation: str
    code: str  # a gRPC status code name
    after: bool  # the runtime acted, then the call failed (a lost answer)


@dataclass
class Violation:
    at: float
    what: str


@dataclass
class SimRuntime:
    """The node's runtime. Deterministic given the rng it is handed."""

    rng: object  # random.Random: call latencies
    sandboxes: dict[str, SimSandbox] = field(default_factory=dict)
    containers: dict[str, SimContainer] = field(default_factory=dict)
    images: set[str] = field(default_factory=set)
    names: dict[str, str] = field(default_factory=dict)
    down: bool = False
    # What Status reports for the pod network (containerd: NetworkReady=false without a CNI config).
    network: RuntimeCondition = field(default_factory=lambda: RuntimeCondition(type="NetworkReady", status=True))
    pending_errors: list[InjectedError] = field(default_factory=list)
    hang_next_stop: bool = False
    # history, for the invariants
    creations: dict[tuple[str, str], list[str]] = field(default_factory=lambda: defaultdict(list))
    sandbox_creations: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    violations: list[Violation] = field(default_factory=list)
    calls: int = 0
    _next_id: int = 0
    _process: int = 0
    _dead_processes: set[int] = field(default_factory=set)

    # -- ids, names ----------------------------------------------------------------

    def _new_id(self, kind: str) -> str:
        self._next_id += 1
        return f"{kind}{self._next_id:06d}" + "0" * 8

    def _violate(self, what: str) -> None:
        self.violations.append(Violation(trio.current_time(), what))

    # -- daemon processes ----------------------------------------------------------

    def client_factory(self) -> Callable[..., SimCriClient]:
        """What the runtime link of one daemon process constructs in place of CriClient."""
        self._process += 1
        process = self._process

        def make(endpoint: str, request_timeout: float = 120.0, metrics=None) -> SimCriClient:
            return SimCriClient(self, process, endpoint, request_timeout, metrics)

        return make

    def kill_process(self) -> None:
        """kill -9 of the current daemon: its connections are gone at once."""
        self._dead_processes.add(self._process)

    # -- faults --------------------------------------------------------------------

    def inject_error(self, operation: str, code: str, *, after: bool) -> None:
        self.pending_errors.append(InjectedError(operation, code, after))

    def exit_container(self, uid: str, name: str, code: int) -> SimContainer | None:
        """Make the running container of (pod uid, name) exit with `code` (the schedule's
        workload: a process that ended by itself)."""
        for c in self.containers.values():
            if c.uid == uid and c.name == name and c.state == api_pb2.CONTAINER_RUNNING:
                self._exited(c, code, "Completed" if code == 0 else "Error")
                return c
        return None

    def _exited(self, c: SimContainer, code: int, reason: str) -> None:
        c.state, c.finished_at, c.exit_code, c.reason = api_pb2.CONTAINER_EXITED, wall_ns(), code, reason

    # -- queries for the harness ---------------------------------------------------

    def running(self, uid: str) -> dict[str, list[str]]:
        out: dict[str, list[str]] = defaultdict(list)
        for c in self.containers.values():
            if c.uid == uid and c.state == api_pb2.CONTAINER_RUNNING:
                out[c.name].append(c.id)
        return out

    def ready_sandboxes(self, uid: str) -> list[str]:
        return [s.id for s in self.sandboxes.values() if s.uid == uid and s.state == api_pb2.SANDBOX_READY]

    def holds(self, uid: str) -> bool:
        return any(s.uid == uid for s in self.sandboxes.values()) or any(
            c.uid == uid for c in self.containers.values()
        )

    def pod_uids(self) -> set[str]:
        return {s.uid for s in self.sandboxes.values()} | {c.uid for c in self.containers.values()}

    def never_started(self, uid: str, name: str) -> int:
        """Containers of (uid, name) created that never ran: a failed or interrupted start,
        which the kubelet must make good with another creation."""
        ids = self.creations.get((uid, name), [])
        ran = self._ran_ids
        return sum(1 for cid in ids if cid not in ran)

    _ran_ids: set[str] = field(default_factory=set)


def _grpc_error(runtime: SimRuntime, endpoint: str, operation: str, code: str, timeout: float | None):
    if code == "UNAVAILABLE":
        return RuntimeUnavailable(endpoint=endpoint, operation=operation, code=code, detail="connect: connection refused")
    if code == "DEADLINE_EXCEEDED":
        return RuntimeTimeout(endpoint=endpoint, operation=operation, timeout=timeout)
    if code == "NOT_FOUND":
        return CriNotFound(endpoint=endpoint, operation=operation, code=code, detail="not found")
    return CriCallError(endpoint=endpoint, operation=operation, code=code, detail="injected failure")


class SimCriClient:
    """One daemon's connection to the SimRuntime, with CriClient's async surface."""

    def __init__(self, runtime: SimRuntime, process: int, endpoint: str, request_timeout: float, metrics) -> None:
        self._rt = runtime
        self._process = process
        self.endpoint = endpoint
        self.request_timeout = request_timeout
        self.metrics = metrics
        self.runtime_version: RuntimeVersion | None = None
        self._open = False

    # -- the one place a call happens --------------------------------------------------

    async def _call(self, operation: str, action: Callable[[], object], *, timeout: float | None | str = "default"):
        rt = self._rt
        deadline = self.request_timeout if timeout == "default" else timeout
        rt.calls += 1
        if self._process in rt._dead_processes:
            await trio.lowlevel.checkpoint()
            raise RuntimeUnavailable(endpoint=self.endpoint, operation=operation, detail="the process is gone")
        if not self._open:
            await trio.lowlevel.checkpoint()
            raise RuntimeUnavailable(endpoint=self.endpoint, operation=operation, detail="the connection was closed")
        # A few ms of virtual latency, drawn per call: it orders concurrent calls and keeps
        # timers from tying (trio breaks deadline ties by object id, not deterministically).
        await trio.sleep(0.0005 + rt.rng.random() * 0.004)
        if rt.down or self._process in rt._dead_processes:
            raise RuntimeUnavailable(endpoint=self.endpoint, operation=operation, code="UNAVAILABLE",
                                     detail="connect: connection refused")
        injected = next((e for e in rt.pending_errors if e.operation == operation), None)
        if injected is not None:
            rt.pending_errors.remove(injected)
            if injected.after:
                action()
            raise _grpc_error(rt, self.endpoint, operation, injected.code, deadline)
        return await self._maybe_async(action, operation, deadline)

    async def _maybe_async(self, action, operation, deadline):
        result = action()
        if isinstance(result, _Wait):
            with trio.move_on_after(deadline if deadline is not None else math.inf) as scope:
                await result.wait()
            if scope.cancelled_caught:
                raise RuntimeTimeout(endpoint=self.endpoint, operation=operation, timeout=deadline)
            return result.value()
        return result

    def _not_found(self, operation: str, what: str) -> CriNotFound:
        return CriNotFound(endpoint=self.endpoint, operation=operation, code="NOT_FOUND", detail=f"{what} not found")

    # -- connection -------------------------------------------------------------------

    async def connect(self) -> RuntimeVersion:
        self._open = True
        try:
            self.runtime_version = await self.version()
        except BaseException:
            self._open = False
            raise
        return self.runtime_version

    async def close(self) -> None:
        self._open = False
        await trio.lowlevel.checkpoint()

    async def __aenter__(self) -> SimCriClient:
        await self.connect()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    # -- RuntimeService ---------------------------------------------------------------

    async def version(self) -> RuntimeVersion:
        return await self._call("version", lambda: SIM_VERSION)

    async def status(self, verbose: bool = False) -> RuntimeStatus:
        return await self._call("status", lambda: RuntimeStatus(conditions=[
            RuntimeCondition(type="RuntimeReady", status=True), self._rt.network,
        ]))

    async def run_pod_sandbox(self, config: api_pb2.PodSandboxConfig, runtime_handler: str = "") -> str:
        rt = self._rt

        def act() -> str:
            m = config.metadata
            name = f"sandbox/{m.name}/{m.namespace}/{m.uid}/{m.attempt}"
            if name in rt.names:
                raise CriCallError(endpoint=self.endpoint, operation="run_podsandbox", code="ALREADY_EXISTS",
                                   detail=f"failed to reserve sandbox name {name!r}: reserved for {rt.names[name]}")
            sid = rt._new_id("s")
            sandbox = SimSandbox(sid, api_pb2.PodSandboxConfig(), wall_ns())
            sandbox.config.CopyFrom(config)
            uid = sandbox.uid
            if uid and rt.ready_sandboxes(uid) and config.labels.get(MANAGED_LABEL) == "true":
                rt._violate(f"pod {uid}: a second ready sandbox created ({sid}) while {rt.ready_sandboxes(uid)} is ready")
            rt.sandboxes[sid] = sandbox
            rt.names[name] = sid
            rt.sandbox_creations[uid].append(sid)
            return sid

        return await self._call("run_podsandbox", act, timeout=2 * self.request_timeout)

    async def stop_pod_sandbox(self, pod_sandbox_id: str) -> None:
        rt = self._rt

        def act() -> None:
            sandbox = rt.sandboxes.get(pod_sandbox_id)
            if sandbox is None:
                raise self._not_found("stop_podsandbox", pod_sandbox_id)
            for c in rt.containers.values():
                if c.sandbox_id == pod_sandbox_id and c.state == api_pb2.CONTAINER_RUNNING:
                    rt._exited(c, 137, "Error")  # no grace left: the kubelet stopped them already
            sandbox.state = api_pb2.SANDBOX_NOTREADY

        await self._call("stop_podsandbox", act)

    async def remove_pod_sandbox(self, pod_sandbox_id: str) -> None:
        rt = self._rt

        def act() -> None:
            sandbox = rt.sandboxes.pop(pod_sandbox_id, None)
            if sandbox is None:
                return  # removing what is not there succeeds, as with containerd
            for cid in [c.id for c in rt.containers.values() if c.sandbox_id == pod_sandbox_id]:
                _remove_container(rt, cid)
            rt.names = {k: v for k, v in rt.names.items() if v != pod_sandbox_id}

        await self._call("remove_podsandbox", act)

    def _sandbox_status(self, s: SimSandbox) -> api_pb2.PodSandboxStatus:
        host = s.config.linux.security_context.namespace_options.network == api_pb2.NODE
        ip = "127.0.0.1" if host else f"10.88.{int(s.id[1:7]) // 250 % 250}.{int(s.id[1:7]) % 250 + 2}"
        return api_pb2.PodSandboxStatus(
            id=s.id, metadata=s.config.metadata, state=s.state, created_at=s.created_at,
            network=api_pb2.PodSandboxNetworkStatus(ip=ip if s.state == api_pb2.SANDBOX_READY else ""),
            labels=s.config.labels, annotations=s.config.annotations,
        )

    async def pod_sandbox_status(self, pod_sandbox_id: str, verbose: bool = False) -> api_pb2.PodSandboxStatusResponse:
        rt = self._rt

        def act():
            s = rt.sandboxes.get(pod_sandbox_id)
            if s is None:
                raise self._not_found("podsandbox_status", pod_sandbox_id)
            return api_pb2.PodSandboxStatusResponse(status=self._sandbox_status(s))

        return await self._call("podsandbox_status", act)

    async def list_pod_sandbox(self, filter: api_pb2.PodSandboxFilter | None = None) -> list[api_pb2.PodSandbox]:
        rt = self._rt

        def act():
            out = []
            for s in rt.sandboxes.values():
                if filter is not None:
                    if filter.id and s.id != filter.id:
                        continue
                    if filter.HasField("state") and s.state != filter.state.state:
                        continue
                    if not _labels_match(filter.label_selector, s.config.labels):
                        continue
                out.append(api_pb2.PodSandbox(
                    id=s.id, metadata=s.config.metadata, state=s.state, created_at=s.created_at,
                    labels=s.config.labels, annotations=s.config.annotations,
                ))
            return out

        return await self._call("list_podsandbox", act)

    async def create_container(
        self, pod_sandbox_id: str, config: api_pb2.ContainerConfig, sandbox_config: api_pb2.PodSandboxConfig,
    ) -> str:
        rt = self._rt

        def act() -> str:
            sandbox = rt.sandboxes.get(pod_sandbox_id)
            if sandbox is None:
                raise self._not_found("create_container", pod_sandbox_id)
            if sandbox.state != api_pb2.SANDBOX_READY:
                raise CriCallError(endpoint=self.endpoint, operation="create_container", code="FAILED_PRECONDITION",
                                   detail=f"sandbox {pod_sandbox_id} is not ready")
            m, sm = config.metadata, sandbox.config.metadata
            name = f"container/{m.name}/{m.attempt}/{sm.name}/{sm.namespace}/{sm.uid}/{sm.attempt}"
            if name in rt.names:
                raise CriCallError(endpoint=self.endpoint, operation="create_container", code="ALREADY_EXISTS",
                                   detail=f"failed to reserve container name {name!r}: reserved for {rt.names[name]}")
            cid = rt._new_id("c")
            c = SimContainer(cid, pod_sandbox_id, api_pb2.ContainerConfig(), wall_ns())
            c.config.CopyFrom(config)
            rt.containers[cid] = c
            rt.names[name] = cid
            rt.creations[(c.uid, c.name)].append(cid)
            return cid

        return await self._call("create_container", act)

    async def start_container(self, container_id: str) -> None:
        rt = self._rt

        def act() -> None:
            c = rt.containers.get(container_id)
            if c is None:
                raise self._not_found("start_container", container_id)
            if c.state != api_pb2.CONTAINER_CREATED:
                raise CriCallError(endpoint=self.endpoint, operation="start_container", code="FAILED_PRECONDITION",
                                   detail=f"container {container_id} is not in created state")
            sandbox = rt.sandboxes.get(c.sandbox_id)
            if sandbox is None or sandbox.state != api_pb2.SANDBOX_READY:
                rt._exited(c, 128, "StartError")
                raise CriCallError(endpoint=self.endpoint, operation="start_container", code="UNKNOWN",
                                   detail=f"sandbox {c.sandbox_id} is not ready")
            others = rt.running(c.uid).get(c.name, [])
            if others and c.config.labels.get(MANAGED_LABEL) == "true":
                rt._violate(f"pod {c.uid} container {c.name}: {c.id} started while {others} still runs")
            c.state, c.started_at, c.ran = api_pb2.CONTAINER_RUNNING, wall_ns(), True
            rt._ran_ids.add(c.id)

        await self._call("start_container", act)

    async def stop_container(self, container_id: str, timeout: int) -> None:
        rt = self._rt

        def act():
            c = rt.containers.get(container_id)
            if c is None:
                raise self._not_found("stop_container", container_id)
            if rt.hang_next_stop:
                rt.hang_next_stop = False
                return _Wait(trio.sleep_forever, lambda: None)  # until the call's deadline
            if c.state != api_pb2.CONTAINER_RUNNING:
                if c.state == api_pb2.CONTAINER_CREATED:
                    rt._exited(c, 0, "Completed")  # never ran; containerd marks it exited
                    c.started_at = 0
                return None
            if c.ignores_term:
                async def grace() -> None:
                    await trio.sleep(max(timeout, 0))

                def killed() -> None:
                    if c.state == api_pb2.CONTAINER_RUNNING:
                        rt._exited(c, 137, "Error")

                return _Wait(grace, killed)
            rt._exited(c, 143, "Error")
            return None

        await self._call("stop_container", act, timeout=self.request_timeout + timeout)

    async def remove_container(self, container_id: str) -> None:
        rt = self._rt
        await self._call("remove_container", lambda: _remove_container(rt, container_id))

    def _container(self, c: SimContainer) -> api_pb2.Container:
        return api_pb2.Container(
            id=c.id, pod_sandbox_id=c.sandbox_id, metadata=c.config.metadata, image=c.config.image,
            image_ref=_image_id(c.config.image.image), state=c.state, created_at=c.created_at,
            labels=c.config.labels, annotations=c.config.annotations,
        )

    async def list_containers(self, filter: api_pb2.ContainerFilter | None = None) -> list[api_pb2.Container]:
        rt = self._rt

        def act():
            out = []
            for c in rt.containers.values():
                if filter is not None:
                    if filter.id and c.id != filter.id:
                        continue
                    if filter.pod_sandbox_id and c.sandbox_id != filter.pod_sandbox_id:
                        continue
                    if filter.HasField("state") and c.state != filter.state.state:
                        continue
                    if not _labels_match(filter.label_selector, c.config.labels):
                        continue
                out.append(self._container(c))
            return out

        return await self._call("list_containers", act)

    async def list_pod_sandbox_and_containers(
        self, sandbox_filter: api_pb2.PodSandboxFilter, container_filter: api_pb2.ContainerFilter
    ) -> tuple[list[api_pb2.PodSandbox], list[api_pb2.Container]]:
        # One call after the other: the same virtual latencies and faults as the two calls
        # alone (CriClient makes them at once; nothing of the kubelet may rely on either order).
        return await self.list_pod_sandbox(sandbox_filter), await self.list_containers(container_filter)

    async def container_status(self, container_id: str, verbose: bool = False) -> api_pb2.ContainerStatusResponse:
        rt = self._rt

        def act():
            c = rt.containers.get(container_id)
            if c is None:
                raise self._not_found("container_status", container_id)
            return api_pb2.ContainerStatusResponse(status=api_pb2.ContainerStatus(
                id=c.id, metadata=c.config.metadata, state=c.state, created_at=c.created_at,
                started_at=c.started_at, finished_at=c.finished_at, exit_code=c.exit_code,
                image=c.config.image, image_ref=_image_id(c.config.image.image), reason=c.reason,
                labels=c.config.labels, annotations=c.config.annotations, mounts=c.config.mounts,
                log_path="",
            ))

        return await self._call("container_status", act)

    async def reopen_container_log(self, container_id: str) -> None:
        await self._call("reopen_container_log", lambda: None)

    async def list_container_stats(self, filter=None) -> list[api_pb2.ContainerStats]:
        return await self._call("list_container_stats", lambda: [])

    async def container_stats(self, container_id: str) -> api_pb2.ContainerStats:
        return await self._call("container_stats", lambda: api_pb2.ContainerStats())

    async def list_pod_sandbox_stats(self, filter=None) -> list[api_pb2.PodSandboxStats]:
        return await self._call("list_podsandbox_stats", lambda: [])

    async def exec_sync(self, container_id: str, cmd, timeout: float) -> ExecSyncResult:
        return await self._call("exec_sync", lambda: ExecSyncResult(stdout=b"", stderr=b"", exit_code=0))

    async def exec(self, container_id: str, cmd, *, stdin: bool, stdout: bool, stderr: bool, tty: bool) -> str:
        raise CriCallError(endpoint=self.endpoint, operation="exec", code="UNIMPLEMENTED", detail="simulated")

    async def attach(self, container_id: str, *, stdin: bool, stdout: bool, stderr: bool, tty: bool) -> str:
        raise CriCallError(endpoint=self.endpoint, operation="attach", code="UNIMPLEMENTED", detail="simulated")

    async def port_forward(self, pod_sandbox_id: str, ports) -> str:
        raise CriCallError(endpoint=self.endpoint, operation="port_forward", code="UNIMPLEMENTED", detail="simulated")

    async def container_events(self):
        # containerd 1.6 has no event stream: the PLEG relists every second.
        await trio.lowlevel.checkpoint()
        raise EventsUnsupported(endpoint=self.endpoint, operation="get_container_events",
                                code="UNIMPLEMENTED", detail="simulated runtime: no events")
        yield  # an async generator, as CriClient's

    # -- ImageService -----------------------------------------------------------------

    async def list_images(self, filter=None) -> list[api_pb2.Image]:
        rt = self._rt
        return await self._call("list_images", lambda: [
            api_pb2.Image(id=_image_id(i), repo_tags=[i], size=1000) for i in sorted(rt.images)
        ])

    async def image_status(self, image: str, verbose: bool = False) -> api_pb2.ImageStatusResponse:
        rt = self._rt

        def act():
            if image in rt.images:
                return api_pb2.ImageStatusResponse(image=api_pb2.Image(id=_image_id(image), repo_tags=[image], size=1000))
            return api_pb2.ImageStatusResponse()

        return await self._call("image_status", act)

    async def pull_image(self, image: str, auth=None, sandbox_config=None) -> str:
        rt = self._rt

        def act() -> str:
            rt.images.add(image)
            return _image_id(image)

        return await self._call("pull_image", act, timeout=None)

    async def remove_image(self, image: str) -> None:
        rt = self._rt
        await self._call("remove_image", lambda: rt.images.discard(image))

    async def image_fs_info(self) -> api_pb2.ImageFsInfoResponse:
        return await self._call("image_fs_info", lambda: api_pb2.ImageFsInfoResponse())


@dataclass
class _Wait:
    """An action that takes (virtual) time at the runtime, then finishes with `value`."""

    wait: Callable[[], object]
    value: Callable[[], object]


def _remove_container(rt: SimRuntime, cid: str) -> None:
    c = rt.containers.pop(cid, None)
    if c is None:
        return  # removing what is not there succeeds, as with containerd
    if c.state == api_pb2.CONTAINER_RUNNING:
        rt._exited(c, 137, "Error")  # containerd stops a running container forcibly
    rt.names = {k: v for k, v in rt.names.items() if v != cid}


def _labels_match(selector, labels) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


@functools.lru_cache(maxsize=None)
def _image_id(image: str) -> str:
    return "sha256:" + "".join(f"{ord(ch):02x}" for ch in image)[:64].ljust(64, "0")
