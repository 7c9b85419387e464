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

When it looks: every `poll` seconds (in memory: no request unless a status changed), and at
once on a message in its mailbox (optional, durable): PodStatusChanged, which a pod worker
sends whenever it publishes a changed status, or PodTerminated from a pod worker that has
stopped and removed everything of a pod. A round writes up to WRITERS pods at once.

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
again after `period`; a mirror pod is also re-read every `period`, since the mirror pod
actor may have replaced it by a new one. A static pod is never deleted from the API here:
its mirror pod is actors/mirror_pods.py's.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Protocol

import msgspec
import trio

from pykubelet.actors.pod_statuses import PodStatuses
from pykubelet.messages.pod import PodStatus
from pykubelet.messages.pod_status_reports import PodTerminated
from pykubelet.pods.backoff import ExponentialBackoff
from pykubelet.pods.manifest import CONFIG_HASH, CONFIG_MIRROR, CONFIG_SOURCE
from pykubelet.pods.status_patch import status_patch
from pykubelet.ports.apiserver import (
    ApiError,
    ApiUnavailable,
    Conflict,
    Forbidden,
    NotFound,
    ServerError,
    TooManyRequests,
    Unauthorized,
)
from pykubelet.supervisor import ActorContext
from pykubelet.supervisor.verbosity import V

log = logging.getLogger("pykubelet.status_manager")

API_SOURCE = "api"
DEFAULT_PERIOD = 10.0  # Go: syncPeriod
DEFAULT_POLL = 1.0
BACKOFF_INITIAL = 0.5
# Pods whose requests may be in flight at once. Go's status manager writes one pod after
# another; against an API server that answers slowly (a loaded machine: tens of ms per
# request) one at a time left 110 new pods' statuses seconds behind the runtime.
WRITERS = 4

# Errors that no other pod would escape now (no answer, 5xx, 429, credentials refused):
# stop the round and back off.
_UNAVAILABLE = (ApiUnavailable, ServerError, TooManyRequests, Unauthorized)


class StatusApi(Protocol):
    """The API client calls this actor makes (ports.apiserver.ApiClient)."""

    async def get(self, path: str) -> dict[str, Any]: ...

    async def patch(self, path: str, body: Any, patch_type: str = "strategic") -> dict[str, Any]: ...

    async def delete(self, path: str, body: Any = None) -> dict[str, Any] | None: ...


def pod_path(namespace: str, name: str) -> str:
    return f"/api/v1/namespaces/{namespace}/pods/{name}"


def delete_options(uid: str) -> dict[str, Any]:
    """Go's DeleteOptions once a pod is terminated: at once, and only this very pod."""
    return {"gracePeriodSeconds": 0, "preconditions": {"uid": uid}}


# --- state --------------------------------------------------------------------------


@dataclass
class PodRecord:
    uid: str
    namespace: str
    name: str
    status: PodStatus | None = None  # the latest on the board
    version: int = 0  # bumped on each change of status
    synced: int = 0  # the version the API holds (0: none yet)
    api_status: dict[str, Any] | None = None  # the API's .status as last read or written; None: GET first
    deleting: bool = False  # the API pod has a deletionTimestamp
    on_board: bool = False
    finished: bool = False  # the kubelet is done with the pod: delete it if it is being deleted
    gone: bool = False  # the API has no such pod: nothing more to write
    hold_until: float = 0.0  # after an answer that retrying at once would repeat (403, 422)
    complained: tuple[int, str] | None = None  # (version, error) already logged
    mirror_of: str | None = None  # a static pod: its config.hash, which its mirror pod carries
    api_uid: str = ""  # the UID of the API pod written (a static pod's: its mirror pod's)
    recheck_at: float = 0.0  # a static pod: when to read its mirror pod again

    @property
    def static(self) -> bool:
        return self.mirror_of is not None

    @property
    def path(self) -> str:
        return pod_path(self.namespace, self.name)

    @property
    def fields(self) -> dict[str, str]:
        return {"pod": f"{self.namespace}/{self.name}", "pod_uid": self.uid}


@dataclass(frozen=True)
class StatusManagerSettings:
    period: float = DEFAULT_PERIOD
    poll: float | None = DEFAULT_POLL
    backoff_initial: float = BACKOFF_INITIAL


class StatusManager:
    """The records of the API pods on the board, and the requests that bring the API in line."""

    def __init__(self, client: StatusApi, statuses: PodStatuses, settings: StatusManagerSettings) -> None:
        self.client = client
        self.statuses = statuses
        self.settings = settings
        self.records: dict[str, PodRecord] = {}
        self._terminated: list[PodTerminated] = []
        self._first_look = True

    # -- what changed (no I/O) ---------------------------------------------------------

    def terminated(self, message: PodTerminated) -> None:
        self._terminated.append(message)

    def observe(self) -> None:
        """Read the board (and the PodTerminated messages): new versions, pods that left."""
        seen = set()
        for pod in self.statuses.pods():
            meta = pod.metadata
            source = meta.annotations.get(CONFIG_SOURCE, API_SOURCE)
            seen.add(meta.uid)
            record = self.records.get(meta.uid)
            if record is None:
                record = self.records[meta.uid] = PodRecord(meta.uid, meta.namespace, meta.name, api_uid=meta.uid)
                if source != API_SOURCE:
                    record.mirror_of, record.api_uid = meta.annotations.get(CONFIG_HASH, meta.uid), ""
                elif not self._first_look:
                    record.api_status = self._status_from_source(meta.uid)
            record.on_board, record.finished = True, False
            record.deleting = record.deleting or meta.deletion_timestamp is not None
            if record.status != pod.status:
                record.status, record.version = pod.status, record.version + 1
        for record in self.records.values():
            if record.on_board and record.uid not in seen:
                record.on_board, record.finished = False, True
        for message in self._terminated:
            record = self.records.get(message.pod_uid)
            if record is None and message.name:
                record = self.records[message.pod_uid] = PodRecord(message.pod_uid, message.namespace, message.name)
            if record is not None and record.uid not in seen:
                record.on_board, record.finished = False, True
        self._terminated.clear()
        self._first_look = False

    def _status_from_source(self, uid: str) -> dict[str, Any] | None:
        """The API's status of a pod that appeared on the board while this incarnation ran:
        the copy its source (the API watch) delivered, as fresh as a GET would be, since
        nothing of this kubelet has written it since (Go GETs it; that GET was a fifth of
        the requests of 110 new pods). Pods already on the board at an incarnation's first
        look are read with a GET: an earlier incarnation may have written them since."""
        status = self.statuses.source_status(uid)
        return msgspec.to_builtins(status) if status is not None else None

    def pending(self, now: float) -> list[PodRecord]:
        """The records that need a request now: finished pods, then unsynced statuses."""
        finished = [r for r in self.records.values() if r.finished and r.hold_until <= now]
        unsynced = [
            r for r in self.records.values()
            if r.on_board and not r.gone and r.hold_until <= now
            and (r.synced < r.version or (r.static and r.recheck_at <= now))
        ]
        return finished + unsynced

    # -- the requests ------------------------------------------------------------------

    async def sync(self) -> None:
        """One round over what is pending, WRITERS pods at a time; raises the first error
        that says the API server is unavailable (once one is seen no other pod is started;
        the rest waits for the next round)."""
        limiter = trio.CapacityLimiter(WRITERS)
        unavailable: list[Exception] = []

        async def one(record: PodRecord) -> None:
            async with limiter:
                if unavailable:
                    return
                try:
                    await self._sync_record(record)
                except _UNAVAILABLE as exc:
                    record.api_status = None  # a write without an answer may or may not have landed
                    unavailable.append(exc)

        async with trio.open_nursery() as nursery:
            for record in self.pending(trio.current_time()):
                nursery.start_soon(one, record)
        if unavailable:
            raise unavailable[0]

    async def _sync_record(self, record: PodRecord) -> None:
        try:
            if record.finished:
                await self._finish(record)
            else:
                if record.static and record.recheck_at <= trio.current_time():
                    record.api_status = None  # the mirror pod may have been replaced
                await self._write_status(record)
        except NotFound:
            if record.static:
                self._no_mirror_pod(record)
            else:
                self._forget_or_mark_gone(record, "the pod is gone from the API server")
        except _UNAVAILABLE:
            raise
        except ApiError as exc:
            if record.static and isinstance(exc, Conflict):
                record.api_status = None  # its mirror pod was replaced since we read it: read again
                return
            if record.static and isinstance(exc, Forbidden) and record.api_status is None:
                # The Node authorizer answers a node's GET of a pod it has no relationship
                # with (none of that name bound to it) with 403, not 404: no mirror pod yet.
                self._no_mirror_pod(record)
                return
            # Refused for this pod alone (403, 409, 422, ...): read it again next time,
            # and do not hammer the API server with the same request meanwhile.
            record.api_status = None
            record.hold_until = trio.current_time() + self.settings.period
            key = (record.version, f"{exc.status} {exc.reason}")
            if record.complained != key:
                record.complained = key
                log.warning("the API server refused a write for this pod: %s", exc, extra=record.fields)

    async def _write_status(self, record: PodRecord) -> None:
        assert record.status is not None
        if record.api_status is None and not await self._read(record):
            return
        version = record.version
        body = status_patch(record.api_status, record.status, uid=record.api_uid)
        if body is not None:
            answer = await self.client.patch(record.path + "/status", body, "strategic")
            self._learn(record, answer)
            log.log(V(3), "pod status written (version %d)", version, extra=record.fields)
        record.synced = version
        if record.static:
            record.recheck_at = trio.current_time() + self.settings.period

    async def _read(self, record: PodRecord) -> bool:
        """GET the pod into the record; False when the API holds another pod (or none)."""
        answer = await self.client.get(record.path)
        meta = answer.get("metadata") or {}
        if record.static:
            if (meta.get("annotations") or {}).get(CONFIG_MIRROR) != record.mirror_of or meta.get("deletionTimestamp"):
                self._no_mirror_pod(record)
                return False
            record.api_uid = str(meta.get("uid") or "")
        elif meta.get("uid") != record.uid:
            self._forget_or_mark_gone(record, "the API server holds another pod under this name")
            return False
        self._learn(record, answer)
        return True

    def _no_mirror_pod(self, record: PodRecord) -> None:
        """A static pod without its mirror pod (yet): look again after a period."""
        record.api_status, record.api_uid = None, ""
        record.recheck_at = record.hold_until = trio.current_time() + self.settings.period
        log.log(V(4), "static pod has no mirror pod yet: status not written", extra=record.fields)

    def _learn(self, record: PodRecord, pod: dict[str, Any]) -> None:
        record.api_status = pod.get("status") or {}
        record.deleting = record.deleting or bool((pod.get("metadata") or {}).get("deletionTimestamp"))

    async def _finish(self, record: PodRecord) -> None:
        """The kubelet is done with the pod: delete it if it is being deleted, and forget it."""
        if record.static:  # its mirror pod is the mirror pod actor's to delete
            self.records.pop(record.uid, None)
            return
        if not record.gone and not record.deleting:
            try:
                found = await self._read(record)
            except NotFound:
                found = False
            if not found or not record.deleting:
                self.records.pop(record.uid, None)
                return
        if not record.gone:
            try:
                await self.client.delete(record.path, delete_options(record.uid))
                log.info("pod terminated: deleted from the API server", extra=record.fields)
            except NotFound:
                pass
            except ApiError as exc:
                if exc.status != 409:  # 409: the UID precondition failed, a new pod has the name
                    raise
        self.records.pop(record.uid, None)

    def _forget_or_mark_gone(self, record: PodRecord, why: str) -> None:
        log.info("pod status no longer reported: %s", why, extra=record.fields)
        if record.finished or not record.on_board:
            self.records.pop(record.uid, None)
        else:
            record.gone = True  # until its status leaves the board


# --- the actor ------------------------------------------------------------------------


class _Wake:
    def __init__(self) -> None:
        self._event = trio.Event()

    def set(self) -> None:
        self._event.set()

    async def wait(self, timeout: float) -> None:
        with trio.move_on_after(timeout):
            await self._event.wait()
        self._event = trio.Event()


async def _read_mailbox(mailbox: Any, manager: StatusManager, wake: _Wake) -> None:
    async for message in mailbox:
        if isinstance(message, PodTerminated):
            manager.terminated(message)
        wake.set()


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
        async with trio.open_nursery() as nursery:
            if ctx.mailbox is not None:
                nursery.start_soon(_read_mailbox, ctx.mailbox, manager, wake)
            while True:
                manager.observe()
                try:
                    await manager.sync()
                except _UNAVAILABLE as exc:
                    if failing != type(exc).__name__:
                        failing = type(exc).__name__
                        log.warning("pod statuses not written, retrying (back-off up to %gs): %s", period, exc)
                    await trio.sleep(backoff.next_delay())  # a message meanwhile is seen right after it
                    continue
                if failing is not None:
                    log.info("pod statuses are written again")
                    failing = None
                backoff.reset()
                await wake.wait(_next_wait(manager, idle))

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
