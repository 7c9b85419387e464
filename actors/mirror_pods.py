"""The mirror pod actor (cluster mode): gives each static pod on the PodStatuses board a
mirror pod in the API server, recreates one that was deleted or no longer matches, and
deletes the mirror of a static pod that is gone (Go: kubelet.syncPod's mirror handling,
HandlePodCleanups' deleteOrphanedMirrorPods, pod/mirror_client.go). pods/mirror.py decides.

It reads the API itself (a list of this node's pods every `period`, and at start) rather
than the api source's watch: the api source then only has to leave mirror pods out of the
set the sync loop runs. A round also starts at once when the board's static pods change
(checked in memory every `poll`), and, after a round that failed, when its mailbox
(optional) says ApiServerAnswersAgain. Errors are logged once per change and the round is
retried next period; the status of a mirror pod is the status manager's, which is told
MirrorPodCreated for each mirror pod created so that it writes the status at once.
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import trio

from pykubelet.actors.pod_statuses import PodStatuses
from pykubelet.messages.api_server import ApiServerAnswersAgain
from pykubelet.messages.pod_status_reports import MirrorPodCreated
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
from pykubelet.supervisor import ActorContext, MailboxFull, UnknownAddress

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
                 desired: Callable[[], set[str] | None] = lambda: None,
                 created: Callable[[str], None] = lambda pod_uid: None) -> None:
        self.client = client
        self.created = created
        self.desired = desired
        self.statuses = statuses
        self.node_name = node_name
        self.registered_node_uid = registered_node_uid
        self.complaints = _Complaints()
        # How many mirror pods the last list found (None: not listed yet). With no static
        # pod and no mirror pod there is nothing to reconcile: no list every period.
        self.mirrors_found: int | None = None
        self.failed = False  # the last round met an API error: it is worth a round once the API answers

    def inputs(self) -> tuple[dict[str, str | None], str | None, bool]:
        """What a round depends on besides the API: a change of it starts a round."""
        return self.static_set(), self.registered_node_uid(), self.desired() is None

    def static_set(self) -> dict[str, str | None]:
        """What a round depends on from the board: full name -> config.hash."""
        pods = static_pods_by_full_name(self.statuses.pods())
        return {k: (p.metadata.annotations.get(CONFIG_HASH) if p is not None else None) for k, p in pods.items()}

    async def sync(self) -> list[MirrorAction]:
        self.failed = False
        static = static_pods_by_full_name(self.statuses.pods())
        if not static and self.mirrors_found == 0:
            return []
        try:
            items, _ = await self.client.list(PODS_PATH, {"fieldSelector": f"spec.nodeName={self.node_name}"})
        except ApiError as exc:
            self.failed = True
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
                    self.created(action.pod_uid)
                except AlreadyExists:
                    pass  # a delete not finished yet, or created meanwhile: the next list says
        except ApiError as exc:
            self.failed = True
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
    status_manager: str | None = None,
):
    """The actor function of the mirror pod actor; its mailbox (optional) accepts
    MirrorPodsMessage. `desired`: the sync loop's desired pod UIDs, None until every source
    has been seen (orphans wait for it). `status_manager`: the address told MirrorPodCreated."""
    if period <= 0 or (poll is not None and poll <= 0):
        raise ValueError("period and poll must be positive")

    async def run(ctx: ActorContext) -> None:
        def created(pod_uid: str) -> None:
            # A lost word costs a period at most: the status manager re-reads mirror pods.
            if status_manager is not None and status_manager in ctx.registry:
                with contextlib.suppress(UnknownAddress, MailboxFull):
                    ctx.registry.lookup(status_manager).send_nowait(MirrorPodCreated(pod_uid=pod_uid))

        mirrors = MirrorPods(client, statuses, node_name, registered_node_uid, desired, created)
        answers_again = _AnswersAgain()
        cut_short = False  # the last wait ended when the API server answered again
        async with trio.open_nursery() as nursery:
            if ctx.mailbox is not None:
                nursery.start_soon(answers_again.read, ctx.mailbox)
            while True:
                seen = mirrors.inputs()
                answers_again.clear()
                await mirrors.sync()
                # A failed round is tried again as soon as the API server answers; should
                # that fail too (a fault of these requests alone), the whole period, so that
                # answers to other requests cannot make it a busy loop.
                retry = mirrors.failed and not cut_short
                cut_short = await _until_next_round(mirrors, seen, answers_again if retry else None, period, poll)

    return run


class _AnswersAgain:
    """Whether the mailbox said ApiServerAnswersAgain since the last clear()."""

    def __init__(self) -> None:
        self._event = trio.Event()

    async def read(self, mailbox: Any) -> None:
        async for message in mailbox:
            if isinstance(message, ApiServerAnswersAgain):
                self._event.set()

    def clear(self) -> None:
        if self._event.is_set():
            self._event = trio.Event()

    def is_set(self) -> bool:
        return self._event.is_set()

    async def wait(self) -> None:
        await self._event.wait()


async def _until_next_round(mirrors: MirrorPods, seen: tuple, answers_again: _AnswersAgain | None,
                           period: float, poll: float | None) -> bool:
    """Until `period` ends, the round's inputs change (looked at every `poll`) or, when
    given, the API server answers again (maybe already, during the round). True when the
    last ended it."""
    with trio.move_on_after(period):
        while True:
            with trio.move_on_after(math.inf if poll is None else poll):
                if answers_again is not None:
                    await answers_again.wait()
                else:
                    await trio.sleep_forever()
            if answers_again is not None and answers_again.is_set():
                return True
            if mirrors.inputs() != seen:
                return False
    return False
