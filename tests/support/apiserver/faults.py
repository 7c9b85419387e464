"""Faults the test process turns on through the control port, and the request log it reads.

A fault is one of fail (answer an error status), hang (hold requests and stall open watch
streams), reset (close connections abruptly, with a TCP RST) or latency (delay every
request). Each applies to the requests it matches — by user (default: everyone but
system:masters, so a test's admin client keeps working), verb and resource — for a count of
requests, for a duration, or until cleared."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any

import trio

from tests.support.apiserver.pki import MASTERS_GROUP, Identity

KINDS = ("fail", "hang", "reset", "latency")


@dataclass(eq=False)
class Fault:
    kind: str
    status: int = 500
    seconds: float = 0.0  # latency per request
    count: int | None = None  # requests left; None = no limit
    until: float | None = None  # trio time; None = until cleared
    users: tuple[str, ...] | None = None  # None = every non-system:masters identity
    include_admin: bool = False
    verbs: tuple[str, ...] | None = None
    resources: tuple[str, ...] | None = None  # "pods", "pods/status", "leases", ...
    retry_after: int | None = None
    message: str = ""
    cleared: bool = False

    def active(self) -> bool:
        if self.count is not None and self.count <= 0:
            return False
        return self.until is None or trio.current_time() < self.until

    def matches_identity(self, identity: Identity | None) -> bool:
        if identity is not None and MASTERS_GROUP in identity.groups and not self.include_admin:
            return False
        if self.users is not None:
            return identity is not None and identity.user in self.users
        return True

    def matches(self, identity: Identity | None, verb: str | None, resource: str | None) -> bool:
        if not self.active() or not self.matches_identity(identity):
            return False
        if self.verbs is not None and verb not in self.verbs:
            return False
        if self.resources is not None and resource not in self.resources:
            return False
        return True

    def consume(self) -> None:
        if self.count is not None:
            self.count -= 1


@dataclass
class RequestRecord:
    time: float  # unix time when the request arrived
    method: str
    path: str
    query: str
    user: str | None
    verb: str | None
    resource: str | None  # with subresource: "pods/status"
    namespace: str | None
    name: str | None
    status: int | None  # None when the connection was reset instead of answered
    duration: float = 0.0
    fault: str | None = None
    # For POST serviceaccounts/<sa>/token: the TokenRequest as answered (spec and status with
    # the issued token), or as sent when refused. None for every other request.
    token_request: dict[str, Any] | None = None


@dataclass
class Faults:
    faults: list[Fault] = field(default_factory=list)
    log: list[RequestRecord] = field(default_factory=list)
    changed: trio.Event = field(default_factory=trio.Event)

    def add(self, spec: dict[str, Any]) -> Fault:
        kind = spec.get("kind")
        if kind not in KINDS:
            raise ValueError(f"unknown fault kind {kind!r}; one of {', '.join(KINDS)}")
        duration = spec.get("duration")
        fault = Fault(
            kind=kind,
            status=int(spec.get("status", 500)),
            seconds=float(spec.get("seconds", 0.0)),
            count=spec.get("count"),
            until=trio.current_time() + float(duration) if duration is not None else None,
            users=tuple(spec["users"]) if spec.get("users") is not None else None,
            include_admin=bool(spec.get("include_admin", False)),
            verbs=tuple(spec["verbs"]) if spec.get("verbs") is not None else None,
            resources=tuple(spec["resources"]) if spec.get("resources") is not None else None,
            retry_after=spec.get("retry_after"),
            message=spec.get("message", ""),
        )
        self.faults.append(fault)
        self._signal()
        return fault

    def clear(self) -> None:
        for fault in self.faults:
            fault.cleared = True
        self.faults.clear()
        self._signal()

    def _signal(self) -> None:
        self.changed.set()
        self.changed = trio.Event()

    def find(self, kind: str, identity: Identity | None, verb: str | None = None, resource: str | None = None) -> Fault | None:
        self.faults = [f for f in self.faults if f.active()]
        for fault in self.faults:
            if fault.kind == kind and fault.matches(identity, verb, resource):
                return fault
        return None

    async def wait_while_hanging(self, identity: Identity | None, verb: str | None, resource: str | None) -> bool:
        """Block while a hang fault matches; True when the request was held."""
        fault = self.find("hang", identity, verb, resource)
        if fault is None:
            return False
        fault.consume()
        # held until the hang's window ends or the fault is cleared
        while not fault.cleared and (fault.until is None or trio.current_time() < fault.until):
            with trio.move_on_at(fault.until if fault.until is not None else float("inf")):
                await self.changed.wait()
        return True

    def record(self, record: RequestRecord) -> None:
        self.log.append(record)

    def records(self) -> list[dict[str, Any]]:
        return [asdict(r) for r in self.log]


def unix_now() -> float:
    return time.time()
