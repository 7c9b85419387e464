"""The mirror pod actor (cluster mode): gives each static pod on the PodStatuses board a
mirror pod in the API server, recreates one that was deleted or no longer matches, and
deletes the mirror of a static pod that is gone (Go: kubelet.syncPod's mirror handling,
HandlePodCleanups' deleteOrphanedMirrorPods, pod/mirror_client.go). pods/mirror.py decides.

It reads the API itself (a list of this node's pods every `period`, and at start) rather
than the api source's watch: the api source then only has to leave mirror pods out of the
set the sync loop runs. A round also starts at once when the board's static pods change
(checked in memory every `poll`). Errors are logged once per change and the round is
retried next period; the status of a mirror pod is the status manager's.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import trio

from pykubelet.actors.pod_statuses import PodStatuses
from pykubelet.pods.manifest import CONFIG_HASH
from pykubelet.pods.mirror import (
    CreateMirrorPod,
    DeleteMirrorPod,
    MirrorAction,
    MirrorNode,
    mirror_actions,
    mirror_pods_by_full_name,
    static_pods_by_full_name,
)
from pykubelet.ports.apiserver import AlreadyExists, ApiError, Conflict, NotFound
from pykubelet.supervisor import ActorContext

log = logging.getLogger("pykubelet.mirror_pods")

PODS_PATH = "/api/v1/pods"
DEFAULT_PERIOD = 10.0
DEFAULT_POLL = 1.0


class MirrorApi(Protocol):
    """The API client calls this actor makes (ports.apiserver.ApiClient)."""

    async def list(self, path: str, params: Mapping[str, Any] | None = None
                   ) -> tuple[list[dict[str, Any]], str]: ...

    async def create(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]: ...

    async def delete(self, path: str, body: Any = None) -> dict[str, Any] | None: ...


def _pods_path(namespace: str) -> str:
    return f"/api/v1/namespaces/{namespace}/pods"


class _Complaints:
    """One log line per change of error, per subject; one when it clears."""

    def __init__(self) -> None:
        self._last: dict[str, str] = {}

    def failed(self, subject: str, exc: ApiError, what: str) -> None:
        key = f"{type(exc).__name__} {exc.status} {exc.reason}"
        if self._last.get(subject) != key:
            self._last[subject] = key
            log.warning("%s failed, retrying every period: %s", what, exc, extra={"pod": subject})

    def ok(self, subject: str, what: str) -> None:
        if self._last.pop(subject, None) is not None:
            log.info("%s succeeds again", what, extra={"pod": subject})


class MirrorPods:
    """One round: list the node's mirror pods, decide, create and delete."""

    def __init__(self, client: MirrorApi, statuses: PodStatuses, node_name: str,
                 registered_node_uid: Callable[[], str | None],
                 desired: Callable[[], set[str] | None] = lambda: None) -> None:
        self.client = client
        self.desired = desired
        self.statuses = statuses
        self.node_name = node_name
        self.registered_node_uid = registered_node_uid
        self.complaints = _Complaints()
        # How many mirror pods the last list found (None: not listed yet). With no static
        # pod and no mirror pod there is nothing to reconcile: no list every period.
        self.mirrors_found: int | None = None

    def static_set(self) -> dict[str, str | None]:
        """What a round depends on from the board: full name -> config.hash."""
        pods = static_pods_by_full_name(self.statuses.pods())
        return {k: (p.metadata.annotations.get(CONFIG_HASH) if p is not None else None) for k, p in pods.items()}

    async def sync(self) -> list[MirrorAction]:
        static = static_pods_by_full_name(self.statuses.pods())
        if not static and self.mirrors_found == 0:
            return []
        try:
            items, _ = await self.client.list(PODS_PATH, {"fieldSelector": f"spec.nodeName={self.node_name}"})
        except ApiError as exc:
            self.complaints.failed("", exc, "listing mirror pods")
            return []
        self.complaints.ok("", "listing mirror pods")
        uid = self.registered_node_uid()
        node = MirrorNode(self.node_name, uid) if uid else None
        mirror_pods = mirror_pods_by_full_name(items, self.node_name)
        self.mirrors_found = len(mirror_pods)
        actions = mirror_actions(static, mirror_pods, node, self.desired())
        for action in actions:
            await self._do(action)
        if actions:
            self.mirrors_found = None  # what the API holds now: known at the next list
        return actions

    async def _do(self, action: MirrorAction) -> None:
        subject = f"{action.namespace}/{action.name}"
        try:
            if isinstance(action, DeleteMirrorPod):
                what = "deleting the mirror pod"
                body = {"gracePeriodSeconds": 0, "preconditions": {"uid": action.uid}}
                try:
                    await self.client.delete(f"{_pods_path(action.namespace)}/{action.name}", body)
                    log.info("mirror pod deleted: %s", action.reason, extra={"pod": subject})
                except (NotFound, Conflict):
                    pass  # gone already, or the name holds another pod now: the next list says
            else:
                assert isinstance(action, CreateMirrorPod)
                what = "creating the mirror pod"
                try:
                    await self.client.create(_pods_path(action.namespace), action.body)
                    log.info("mirror pod created", extra={"pod": subject})
                except AlreadyExists:
                    pass  # a delete not finished yet, or created meanwhile: the next list says
        except ApiError as exc:
            self.complaints.failed(subject, exc, what)
            return
        self.complaints.ok(subject, what)


def mirror_pods_actor(
    *,
    client: MirrorApi,
    statuses: PodStatuses,
    node_name: str,
    registered_node_uid: Callable[[], str | None],
    desired: Callable[[], set[str] | None] = lambda: None,
    period: float = DEFAULT_PERIOD,
    poll: float | None = DEFAULT_POLL,
):
    """The actor function of the mirror pod actor (no mailbox). `desired`: the sync loop's
    desired pod UIDs, None until every source has been seen (orphans wait for it)."""
    if period <= 0 or (poll is not None and poll <= 0):
        raise ValueError("period and poll must be positive")

    async def run(ctx: ActorContext) -> None:
        mirrors = MirrorPods(client, statuses, node_name, registered_node_uid, desired)
        while True:
            seen = (mirrors.static_set(), registered_node_uid(), desired() is None)
            await mirrors.sync()
            with trio.move_on_after(period):
                while poll is not None:
                    await trio.sleep(poll)
                    if (mirrors.static_set(), registered_node_uid(), desired() is None) != seen:
                        break
                else:
                    await trio.sleep_forever()

    return run
