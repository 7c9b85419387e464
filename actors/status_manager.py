"""The status manager: reports to the API server the statuses the pod workers publish on
the PodStatuses board, for the pods that came from the API (Go: pkg/kubelet/status), and
deletes a pod object once the kubelet has finished terminating a pod being deleted.

Versions: each change of a pod's status on the board is a new version; a version is
written once (PATCH pods/status with a strategic merge patch against the API's status and
the UID as precondition) and nothing is sent while it does not change. What the API holds
is known from the answer to the last write, and for a pod new on the board from the copy
the API watch delivered; a new incarnation (and any failed write) first GETs the pod, so
after a restart it patches only what differs. A failed write is retried,
0.5 s doubling to `period` (Go syncs every status each 10 s), and the latest status is
never dropped: the board outlives this actor. A pod the API no longer has (404, or its
name now holds another UID) is forgotten.

When it looks: every `poll` seconds at the whole board (in memory: no request unless a
status changed), and at once on a message in its mailbox (optional, durable) at the pods it
names alone (as Go's syncPod between its syncBatch rounds), so that a status change costs
the same with 500 pods as with 5: PodStatusChanged, which a pod worker sends whenever it
publishes a changed status, or PodTerminated from a pod worker that has stopped and removed
everything of a pod. What no message names (a pod refused at admission, a hold that ended)
waits for the next whole look, at most `poll` later. A round writes up to WRITERS pods at once.
Two more messages end a wait: MirrorPodCreated (from the mirror pod actor) has a static
pod's new mirror pod read and written at once, not a period later; ApiServerAnswersAgain
(from the daemon, once the API server answers after a request that got no answer) ends a
back-off, so that what piled up during an outage is written as soon as the server is back.

Deletion (Go's canBeDeleted, with this kubelet's signal of "termination finished"): an API
pod is deleted (gracePeriodSeconds 0, preconditions.uid) when
  - the kubelet is done with it: its status left the board (a pod worker removes it only
    after every container and the sandbox are stopped and removed) or a PodTerminated
    names it, and
  - the API pod has a deletionTimestamp: seen on the board's copy of the pod or in the API's
    answers, else asked by a GET at that moment (404, another UID or no deletionTimestamp:
    the pod is simply forgotten).
Static pods (config.source other than "api"; Go's translatePodUID): their status goes to
their mirror pod, the API pod of the same name whose kubernetes.io/config.mirror annotation
is the static pod's config.hash, with the mirror pod's UID as precondition. Without one
(not created yet, or of an older manifest) nothing is written and the pod is looked at
again after `period`, or at once on MirrorPodCreated; a mirror pod is also re-read every
`period`, since the mirror pod actor may have replaced it by a new one. A static pod is
never deleted from the API here: its mirror pod is actors/mirror_pods.py's.
"""

from __future__ import annotations

import logging
from typing import Any

import trio

from pykubelet.actors.pod_statuses import PodStatuses
from pykubelet.actors.status_sync import (
    BACKOFF_INITIAL,
    DEFAULT_PERIOD,
    DEFAULT_POLL,
    UNAVAILABLE,
    StatusApi,
    StatusManager,
    StatusManagerSettings,
)
from pykubelet.messages.api_server import ApiServerAnswersAgain
from pykubelet.messages.pod_status_reports import MirrorPodCreated, PodTerminated
from pykubelet.pods.backoff import ExponentialBackoff
from pykubelet.supervisor import ActorContext

log = logging.getLogger("pykubelet.status_manager")


# --- the actor ------------------------------------------------------------------------


class _Wake:
    """The pods the mailbox named since the last look, the event that ends a wait early,
    and whether the API server answered again since the last round began."""

    def __init__(self) -> None:
        self._event = trio.Event()
        self.named: set[str] = set()
        self._answers_again = trio.Event()

    def set(self, uid: str) -> None:
        self.named.add(uid)
        self._event.set()

    async def wait_until(self, deadline: float) -> set[str]:
        """Until `deadline` or a message; the pods named meanwhile (and before)."""
        with trio.move_on_at(deadline):
            await self._event.wait()
        self._event = trio.Event()
        named, self.named = self.named, set()
        return named

    def answers_again(self) -> None:
        self._answers_again.set()

    def round_begins(self) -> None:
        if self._answers_again.is_set():
            self._answers_again = trio.Event()

    async def back_off(self, delay: float, *, may_cut_short: bool) -> bool:
        """Sleep `delay`, or (`may_cut_short`) only until the API server answers again: an
        answer since the failed round began says that its failure may be over. True when
        cut short."""
        if not may_cut_short:
            await trio.sleep(delay)
            return False
        with trio.move_on_after(delay):
            await self._answers_again.wait()
        return self._answers_again.is_set()


async def _read_mailbox(mailbox: Any, manager: StatusManager, wake: _Wake) -> None:
    async for message in mailbox:
        if isinstance(message, ApiServerAnswersAgain):
            wake.answers_again()
            continue
        if isinstance(message, PodTerminated):
            manager.terminated(message)
        elif isinstance(message, MirrorPodCreated):
            manager.mirror_pod_created(message.pod_uid)
        wake.set(message.pod_uid)


def status_manager_actor(
    *,
    client: StatusApi,
    statuses: PodStatuses,
    period: float = DEFAULT_PERIOD,
    poll: float | None = DEFAULT_POLL,
    backoff_initial: float = BACKOFF_INITIAL,
):
    """The actor function of the status manager. Its mailbox is optional (give it a durable
    one accepting StatusManagerMessage so that PodTerminated survives a restart); without
    it, the board alone tells what changed and which pods the kubelet let go."""
    if period <= 0 or (poll is not None and poll <= 0) or not 0 < backoff_initial <= period:
        raise ValueError("period and poll must be positive, 0 < backoff_initial <= period")
    settings = StatusManagerSettings(period=period, poll=poll, backoff_initial=backoff_initial)

    async def run(ctx: ActorContext) -> None:
        manager = StatusManager(client, statuses, settings)
        wake = _Wake()
        idle = poll if poll is not None else period
        backoff = ExponentialBackoff(backoff_initial, period)
        failing: str | None = None
        cut_short = False  # the last back-off ended when the API server answered again
        async with trio.open_nursery() as nursery:
            if ctx.mailbox is not None:
                nursery.start_soon(_read_mailbox, ctx.mailbox, manager, wake)
            whole_look_at = trio.current_time()
            named: set[str] | None = None
            while True:
                # The whole board when its time has come, else only the pods named.
                uids = None if trio.current_time() >= whole_look_at else named
                manager.observe(uids)
                wake.round_begins()
                try:
                    await manager.sync(uids)
                except UNAVAILABLE as exc:
                    if failing != type(exc).__name__:
                        failing = type(exc).__name__
                        log.warning("pod statuses not written, retrying (back-off up to %gs): %s", period, exc)
                    # One retry at once when the API server answers again; should that
                    # fail too (a fault of these requests alone), the whole back-off, so
                    # that answers to other requests cannot make it a busy loop. A
                    # message meanwhile is seen right after it.
                    cut_short = await wake.back_off(backoff.next_delay(), may_cut_short=not cut_short)
                    whole_look_at, named = trio.current_time(), None
                    continue
                if failing is not None:
                    log.info("pod statuses are written again")
                    failing = None
                backoff.reset()
                cut_short = False
                if uids is None:
                    whole_look_at = trio.current_time() + _next_wait(manager, idle)
                named = await wake.wait_until(whole_look_at)

    return run


def _next_wait(manager: StatusManager, idle: float) -> float:
    """Until the next poll, or sooner when a held record comes due."""
    now = trio.current_time()
    held = [
        r.hold_until - now for r in manager.records.values()
        if r.hold_until > now and (r.finished or r.synced < r.version)
    ]
    held += [r.recheck_at - now for r in manager.records.values() if r.static and r.on_board and r.recheck_at > now]
    return max(0.0, min([idle, *held]))
