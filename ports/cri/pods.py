"""Reading pods back from the runtime: the CRI view of what pykubelet created.

Only sandboxes and containers labelled io.pykubelet.managed=true are ever read, so the
kubelet never touches what it did not create. The PLEG relists with two list calls; a
pod worker reads one pod's full status (sandbox IPs, exit codes, times).
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Sequence
from typing import NamedTuple

import trio

from pykubelet.messages.cri_api import api_pb2
from pykubelet.messages.runtime import (
    ContainerRuntimeStatus,
    PodRuntimeStatus,
    Relist,
    RelistedContainer,
    RelistedSandbox,
    SandboxRuntimeStatus,
)
from pykubelet.pods.labels import (
    CONTAINER_HASH_ANNOTATION,
    CONTAINER_NAME_LABEL,
    MANAGED_LABEL,
    POD_TERMINATION_GRACE_PERIOD_ANNOTATION,
    PRESTOP_HANDLER_ANNOTATION,
    POD_NAME_LABEL,
    POD_NAMESPACE_LABEL,
    POD_UID_LABEL,
    RESTART_COUNT_ANNOTATION,
)

from .client import CriClient
from .errors import CriNotFound

CONTAINER_STATES = {
    api_pb2.CONTAINER_CREATED: "created",
    api_pb2.CONTAINER_RUNNING: "running",
    api_pb2.CONTAINER_EXITED: "exited",
    api_pb2.CONTAINER_UNKNOWN: "unknown",
}
_MANAGED = {MANAGED_LABEL: "true"}


def _seconds(nanoseconds: int) -> float | None:
    return nanoseconds / 1e9 if nanoseconds else None


class Listing(NamedTuple):
    """Every managed sandbox and container, as the runtime's two list calls return them."""

    sandboxes: Sequence[api_pb2.PodSandbox]
    containers: Sequence[api_pb2.Container]


async def list_managed(cri: CriClient) -> Listing:
    """Every managed sandbox and container, from two list calls made at once (the PLEG's
    relist; Go's makes them one after the other: neither is a snapshot of the other)."""
    return Listing(*await cri.list_pod_sandbox_and_containers(
        api_pb2.PodSandboxFilter(label_selector=_MANAGED), api_pb2.ContainerFilter(label_selector=_MANAGED),
    ))


def relisted_sandbox(s: api_pb2.PodSandbox) -> RelistedSandbox:
    return RelistedSandbox(
        id=s.id,
        pod_uid=s.labels.get(POD_UID_LABEL, ""),
        name=s.metadata.name,
        namespace=s.metadata.namespace,
        ready=s.state == api_pb2.SANDBOX_READY,
    )


def relisted_container(c: api_pb2.Container) -> RelistedContainer:
    return RelistedContainer(
        id=c.id,
        pod_uid=c.labels.get(POD_UID_LABEL, ""),
        name=c.labels.get(CONTAINER_NAME_LABEL, c.metadata.name),
        state=CONTAINER_STATES.get(c.state, "unknown"),
    )


async def relist(cri: CriClient) -> Relist:
    """Every managed sandbox and container, from two list calls, converted."""
    listing = await list_managed(cri)
    return Relist(
        sandboxes=[relisted_sandbox(s) for s in listing.sandboxes],
        containers=[relisted_container(c) for c in listing.containers],
    )


async def read_pod_status(cri: CriClient, uid: str, name: str = "", namespace: str = "") -> PodRuntimeStatus:
    """Everything the runtime holds for one pod, newest first. The sandboxes and the
    containers are read side by side, and each one's status call too: a pod worker waits
    for this before and after every sync, so its latency is the pod's."""
    selector = {**_MANAGED, POD_UID_LABEL: uid}
    sandboxes: list[SandboxRuntimeStatus] = []
    containers: list[ContainerRuntimeStatus] = []
    names: list[tuple[str, str]] = []

    async def read_sandbox(sandbox: api_pb2.PodSandbox) -> None:
        names.append((
            sandbox.labels.get(POD_NAME_LABEL, sandbox.metadata.name),
            sandbox.labels.get(POD_NAMESPACE_LABEL, sandbox.metadata.namespace),
        ))
        ip = ""
        if sandbox.state == api_pb2.SANDBOX_READY:
            try:
                ip = (await cri.pod_sandbox_status(sandbox.id)).status.network.ip
            except CriNotFound:
                return  # removed meanwhile
        sandboxes.append(_sandbox_runtime_status(sandbox, ip))

    async def read_sandboxes() -> None:
        listed = await cri.list_pod_sandbox(api_pb2.PodSandboxFilter(label_selector=selector))
        await _side_by_side(*(functools.partial(read_sandbox, sandbox) for sandbox in listed))

    async def read_containers() -> None:
        listed = await cri.list_containers(api_pb2.ContainerFilter(label_selector=selector))
        await _side_by_side(*(functools.partial(_read_container, cri, c.id, containers) for c in listed))

    await _side_by_side(read_sandboxes, read_containers)
    if names:
        name, namespace = name or names[0][0], namespace or names[0][1]
    return _pod_runtime_status(uid, name, namespace, sandboxes, containers)


async def read_created(
    cri: CriClient, uid: str, name: str, namespace: str, sandbox_ids: Sequence[str], container_ids: Sequence[str]
) -> PodRuntimeStatus:
    """The status of a pod the runtime held nothing of before its worker created these
    sandboxes and containers: their status calls alone, side by side, without the two list
    calls of read_pod_status (a pod worker serialises its pod's changes, so nothing else
    of the pod can exist). An object removed meanwhile is left out."""
    sandboxes: list[SandboxRuntimeStatus] = []
    containers: list[ContainerRuntimeStatus] = []

    async def read_sandbox(sandbox_id: str) -> None:
        try:
            status = (await cri.pod_sandbox_status(sandbox_id)).status
        except CriNotFound:
            return
        sandboxes.append(_sandbox_runtime_status(status, status.network.ip))

    await _side_by_side(
        *(functools.partial(read_sandbox, i) for i in sandbox_ids),
        *(functools.partial(_read_container, cri, i, containers) for i in container_ids),
    )
    return _pod_runtime_status(uid, name, namespace, sandboxes, containers)


def _sandbox_runtime_status(sandbox: api_pb2.PodSandbox | api_pb2.PodSandboxStatus, ip: str) -> SandboxRuntimeStatus:
    ready = sandbox.state == api_pb2.SANDBOX_READY
    return SandboxRuntimeStatus(
        id=sandbox.id,
        state="ready" if ready else "notready",
        created_at=sandbox.created_at / 1e9,
        attempt=sandbox.metadata.attempt,
        ip=ip if ready else "",
    )


async def _read_container(cri: CriClient, container_id: str, into: list[ContainerRuntimeStatus]) -> None:
    try:
        into.append(container_runtime_status((await cri.container_status(container_id)).status))
    except CriNotFound:
        pass  # removed meanwhile


def _pod_runtime_status(
    uid: str, name: str, namespace: str, sandboxes: list[SandboxRuntimeStatus], containers: list[ContainerRuntimeStatus]
) -> PodRuntimeStatus:
    """Newest first, both."""
    sandboxes.sort(key=lambda s: s.created_at, reverse=True)
    containers.sort(key=lambda c: c.created_at, reverse=True)
    return PodRuntimeStatus(uid=uid, name=name, namespace=namespace, sandboxes=sandboxes, containers=containers)


async def _side_by_side(*calls: Callable[[], Awaitable[None]]) -> None:
    """Run the calls concurrently; the first error is raised as itself (not in an
    ExceptionGroup), so that callers catch CriError as from a single call."""
    if len(calls) <= 1:
        for call in calls:
            await call()
        return
    try:
        async with trio.open_nursery() as nursery:
            for call in calls:
                nursery.start_soon(call)
    except BaseExceptionGroup as group:
        raise _first_leaf(group) from None


def _first_leaf(group: BaseExceptionGroup) -> BaseException:
    first = group.exceptions[0]
    return _first_leaf(first) if isinstance(first, BaseExceptionGroup) else first


def container_runtime_status(status: api_pb2.ContainerStatus) -> ContainerRuntimeStatus:
    state = CONTAINER_STATES.get(status.state, "unknown")
    annotations = status.annotations
    return ContainerRuntimeStatus(
        id=status.id,
        name=status.labels.get(CONTAINER_NAME_LABEL, status.metadata.name),
        state=state,
        created_at=status.created_at / 1e9,
        started_at=_seconds(status.started_at),
        finished_at=_seconds(status.finished_at),
        exit_code=status.exit_code if state == "exited" else None,
        reason=status.reason,
        message=status.message,
        image=status.image.image,
        image_ref=status.image_ref,
        hash=annotations.get(CONTAINER_HASH_ANNOTATION, ""),
        restart_count=_int(annotations.get(RESTART_COUNT_ANNOTATION)) or 0,
        attempt=status.metadata.attempt,
        grace_period=_int(annotations.get(POD_TERMINATION_GRACE_PERIOD_ANNOTATION)),
        prestop_handler=annotations.get(PRESTOP_HANDLER_ANNOTATION, ""),
    )


def _int(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None
