"""The node lease actor: creates this node's Lease in kube-node-lease and renews it every
quarter of its duration, the heartbeat the node lifecycle controller watches (Go:
pkg/kubelet/nodelease and component-helpers' lease controller).

It renews by PUT of the last Lease it saw (no GET per renewal); a 409 means someone else
wrote it, so it reads it again and retries at once. Other errors back off from 0.2 s to
7 s without ever stopping renewal. The Lease is created only once the Node's uid is known
(from the node status actor), so that it always carries its owner reference.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import trio

from pykubelet.pods.backoff import ExponentialBackoff
from pykubelet.pods.lease import (
    BACKOFF_INITIAL,
    BACKOFF_MAX,
    DEFAULT_DURATION,
    MAX_UPDATE_RETRIES,
    NAMESPACE,
    lease_path,
    leases_path,
    new_lease,
    renew_interval,
    renewed_lease,
)
from pykubelet.ports.apiserver.errors import ApiError, Conflict, NotFound
from pykubelet.supervisor import ActorContext

log = logging.getLogger("pykubelet.node_lease")


class LeaseApi(Protocol):
    """The API client calls this actor makes (the heartbeat client: its request timeout is
    min(lease duration, --node-status-update-frequency), as the Go kubelet's)."""

    async def get(self, path: str) -> dict[str, Any]: ...

    async def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]: ...

    async def replace(self, path: str, body: dict[str, Any]) -> dict[str, Any]: ...


@dataclass(frozen=True)
class NodeLeaseSettings:
    duration: int = DEFAULT_DURATION  # KubeletConfiguration nodeLeaseDurationSeconds
    namespace: str = NAMESPACE
    jitter: float = 0.04  # Go: wait.JitterUntil(sync, renewInterval, 0.04, ...)
    max_update_retries: int = MAX_UPDATE_RETRIES
    backoff_initial: float = BACKOFF_INITIAL
    backoff_max: float = BACKOFF_MAX

    @property
    def renew_interval(self) -> float:
        return renew_interval(self.duration)


def node_lease_actor(
    settings: NodeLeaseSettings,
    *,
    client: LeaseApi,
    node_name: str,
    node_uid: Callable[[], str | None],
    wall_clock: Callable[[], float] = time.time,
    jitter_source: Callable[[], float] = random.random,
):
    """`wall_clock` dates renewTime (Unix seconds); the renewal cadence runs on trio's clock.
    `node_uid` is the Node's uid once the node status actor has seen it, else None."""

    async def run(ctx: ActorContext) -> None:
        controller = _LeaseController(settings, client, node_name, node_uid, wall_clock)
        while True:
            await controller.sync()
            # Sliding, as Go: the next renewal is an interval after this one ended.
            await trio.sleep(settings.renew_interval * (1 + settings.jitter * jitter_source()))

    return run


class _LeaseController:
    def __init__(self, settings, client, node_name, node_uid, wall_clock) -> None:
        self.settings = settings
        self.client = client
        self.name = node_name
        self.node_uid = node_uid
        self.wall_clock = wall_clock
        self.path = lease_path(node_name, settings.namespace)
        self.latest: dict[str, Any] | None = None  # the Lease as last written or read
        self.problem: str | None = None

    async def sync(self) -> None:
        """One renewal (Go: controller.sync)."""
        if self.latest is not None and await self.retry_update(self.latest):
            return
        lease, created = await self.backoff_ensure()
        self.latest = lease
        if lease is not None and not created:
            await self.retry_update(lease)

    async def retry_update(self, base: dict[str, Any]) -> bool:
        """PUT the renewed Lease; at once again on failure, a few times. A conflict means
        the Lease changed under us: read it (or create it again) and renew that."""
        for _ in range(self.settings.max_update_retries):
            lease = renewed_lease(base, now=self.wall_clock(), node_name=self.name, node_uid=self.node_uid())
            try:
                self.latest = await self.client.replace(self.path, lease)
            except Conflict:
                base, _ = await self.backoff_ensure()
                if base is None:
                    return False
                continue
            except ApiError as exc:
                self._failed(f"failed to renew lease {self.settings.namespace}/{self.name}: {exc}")
                continue
            self._cleared("renewed")
            return True
        return False

    async def backoff_ensure(self) -> tuple[dict[str, Any] | None, bool]:
        """The Lease as it is now, created if missing; retried with back-off until the API
        server answers. (None, False) while the Node's uid is not known yet."""
        backoff = ExponentialBackoff(self.settings.backoff_initial, self.settings.backoff_max)
        while True:
            try:
                return await self.ensure()
            except ApiError as exc:
                delay = backoff.next_delay()
                self._failed(f"failed to ensure lease {self.settings.namespace}/{self.name} exists, "
                             f"retrying with back-off up to {self.settings.backoff_max:g}s: {exc}")  # fmt: skip
                await trio.sleep(delay)

    async def ensure(self) -> tuple[dict[str, Any] | None, bool]:
        try:
            return await self.client.get(self.path), False
        except NotFound:
            pass
        uid = self.node_uid()
        if uid is None:
            self._failed(f"lease {self.settings.namespace}/{self.name}: waiting for node {self.name} "
                         "to be registered before creating its lease")  # fmt: skip
            return None, False
        lease = new_lease(self.name, now=self.wall_clock(), node_uid=uid, duration=self.settings.duration,
                          namespace=self.settings.namespace)  # fmt: skip
        created = await self.client.create(leases_path(self.settings.namespace), lease)
        log.info("created lease %s/%s", self.settings.namespace, self.name, extra={"node": self.name})
        self._cleared("created")
        return created, True

    def _failed(self, message: str) -> None:
        if message != self.problem:
            log.warning("%s", message, extra={"node": self.name})
            self.problem = message

    def _cleared(self, what: str) -> None:
        if self.problem is not None:
            log.info("lease %s/%s %s again", self.settings.namespace, self.name, what, extra={"node": self.name})
            self.problem = None
