"""The status manager's records of the API pods on the PodStatuses board and the requests
that bring the API server in line with them (what to write, delete or forget; errors);
actors/status_manager.py's loop decides when to look.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol

import msgspec
import trio

from pykubelet.actors.pod_statuses import PodStatuses
from pykubelet.messages.pod import PodStatus
from pykubelet.messages.pod_status_reports import PodTerminated
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
UNAVAILABLE = (ApiUnavailable, ServerError, TooManyRequests, Unauthorized)


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
        self._mirrors_created: set[str] = set()
        self._first_look = True

    # -- what changed (no I/O) ---------------------------------------------------------

    def terminated(self, message: PodTerminated) -> None:
        self._terminated.append(message)

    def mirror_pod_created(self, uid: str) -> None:
        """The mirror pod of this static pod was created: read it at the next look, whatever
        an earlier look found. Applied by observe(), between rounds, so that a look at the
        pod still in flight cannot put its hold back."""
        self._mirrors_created.add(uid)

    def observe(self, uids: Iterable[str] | None = None) -> None:
        """Read the board, the whole of it or (`uids`) these pods on it, and the
        PodTerminated messages: new versions, pods that left."""
        if uids is None:
            on_board = self.statuses.pods()
            for record in self.records.values():
                if record.on_board and self.statuses.pod(record.uid) is None:
                    record.on_board, record.finished = False, True
        else:
            on_board = []
            for uid in uids:
                pod = self.statuses.pod(uid)
                record = self.records.get(uid)
                if pod is not None:
                    on_board.append(pod)
                elif record is not None and record.on_board:
                    record.on_board, record.finished = False, True
        for pod in on_board:
            meta = pod.metadata
            source = meta.annotations.get(CONFIG_SOURCE, API_SOURCE)
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
        terminated = [(m.pod_uid, m.namespace, m.name) for m in self._terminated]
        if uids is None:  # and on a whole look, what the board keeps of them (a new incarnation's too)
            terminated += [(uid, ns, name) for uid, (ns, name) in self.statuses.terminated().items()]
        for uid, namespace, name in terminated:
            record = self.records.get(uid)
            if record is None and name:
                record = self.records[uid] = PodRecord(uid, namespace, name)
            if record is not None and self.statuses.pod(record.uid) is None:
                record.on_board, record.finished = False, True
        self._terminated.clear()
        for uid in self._mirrors_created:
            record = self.records.get(uid)
            if record is not None and record.static:
                record.api_status, record.hold_until, record.recheck_at = None, 0.0, 0.0
        self._mirrors_created.clear()
        self._first_look = False

    def _status_from_source(self, uid: str) -> dict[str, Any] | None:
        """The API's status of a pod that appeared on the board while this incarnation ran:
        the copy its source (the API watch) delivered, as fresh as a GET would be, since
        nothing of this kubelet has written it since (Go GETs it; that GET was a fifth of
        the requests of 110 new pods). Pods already on the board at an incarnation's first
        look are read with a GET: an earlier incarnation may have written them since."""
        status = self.statuses.source_status(uid)
        return msgspec.to_builtins(status) if status is not None else None

    def pending(self, now: float, uids: Iterable[str] | None = None) -> list[PodRecord]:
        """The records (all, or of `uids`) that need a request now: finished pods, then
        unsynced statuses."""
        records = self.records.values() if uids is None else [r for u in uids if (r := self.records.get(u))]
        finished = [r for r in records if r.finished and r.hold_until <= now]
        unsynced = [
            r for r in records
            if r.on_board and not r.gone and r.hold_until <= now
            and (r.synced < r.version or (r.static and r.recheck_at <= now))
        ]
        return finished + unsynced

    # -- the requests ------------------------------------------------------------------

    async def sync(self, uids: Iterable[str] | None = None) -> None:
        """One round over what is pending (of `uids`), WRITERS pods at a time; raises the first error
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
                except UNAVAILABLE as exc:
                    record.api_status = None  # a write without an answer may or may not have landed
                    unavailable.append(exc)

        async with trio.open_nursery() as nursery:
            for record in self.pending(trio.current_time(), uids):
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
        except UNAVAILABLE:
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
            self._drop(record)
            return
        if not record.gone and not record.deleting:
            try:
                found = await self._read(record)
            except NotFound:
                found = False
            if not found or not record.deleting:
                self._drop(record)
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
        self._drop(record)

    def _drop(self, record: PodRecord) -> None:
        """Forget the pod; a terminated one leaves the board's list too (deleted or gone)."""
        self.records.pop(record.uid, None)
        if record.finished or not record.on_board:
            self.statuses.release_terminated(record.uid)

    def _forget_or_mark_gone(self, record: PodRecord, why: str) -> None:
        log.info("pod status no longer reported: %s", why, extra=record.fields)
        if record.finished or not record.on_board:
            self._drop(record)
        else:
            record.gone = True  # until its status leaves the board


__all__ = [
    "BACKOFF_INITIAL", "DEFAULT_PERIOD", "DEFAULT_POLL", "UNAVAILABLE", "WRITERS", "PodRecord", "StatusApi",
    "StatusManager", "StatusManagerSettings", "delete_options", "pod_path",
]
