"""Watch streams as the watch cache serves them: initial ADDED events or the history since a
resourceVersion, live events filtered by namespace and selectors (an object that starts or
stops matching arrives as ADDED or DELETED), periodic BOOKMARKs, ERROR 410 for an expired
version, and the server-side timeout."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, Callable

import trio

from tests.support.apiserver import errors, selectors
from tests.support.apiserver.store import Store, Watcher, WatchEvent, ResourceType

INITIAL_EVENTS_END = "k8s.io/initial-events-end"


@dataclass
class WatchFilter:
    resource: ResourceType
    namespace: str | None
    fields: list[selectors.FieldRequirement]
    labels: list[selectors.LabelRequirement]

    def matches(self, obj: dict[str, Any] | None) -> bool:
        if obj is None:
            return False
        if self.namespace is not None and (obj.get("metadata") or {}).get("namespace") != self.namespace:
            return False
        return selectors.fields_match(obj, self.resource.name, self.fields) and selectors.labels_match(obj, self.labels)

    def translate(self, event: WatchEvent) -> tuple[str, dict[str, Any]] | None:
        now, before = self.matches(event.obj), self.matches(event.old)
        if event.type == "ADDED":
            return ("ADDED", event.obj) if now else None
        if event.type == "DELETED":
            return ("DELETED", event.obj) if before or now else None
        if now and before:
            return ("MODIFIED", event.obj)
        if now:
            return ("ADDED", event.obj)
        if before:
            return ("DELETED", event.obj)
        return None


def encode(event_type: str, obj: dict[str, Any]) -> bytes:
    return json.dumps({"type": event_type, "object": obj}, separators=(",", ":")).encode() + b"\n"


def bookmark_object(resource: ResourceType, rv: int, *, initial_events_end: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"resourceVersion": str(rv), "creationTimestamp": None}
    if initial_events_end:
        meta["annotations"] = {INITIAL_EVENTS_END: "true"}
    obj: dict[str, Any] = {"kind": resource.kind, "apiVersion": resource.api_version, "metadata": meta}
    if resource.kind == "Pod":  # what Go serialises for an empty Pod
        obj["spec"] = {"containers": None}
        obj["status"] = {}
    return obj


def expired_event(message: str) -> bytes:
    return encode("ERROR", errors.status_object(410, message, "Expired"))


@dataclass
class WatchStream:
    """One open watch: the events to send first, then the live watcher."""

    store: Store
    watcher: Watcher
    filter: WatchFilter
    initial: list[tuple[str, dict[str, Any]]]
    send_initial_end_bookmark: bool
    after_rv: int  # live events at or below this version were already covered
    bookmarks: bool
    bookmark_interval: Callable[[], float]
    deadline: float  # trio time
    stall: Callable[[], Any]  # awaitable factory: blocks while a hang fault matches

    async def events(self) -> AsyncIterator[bytes]:
        try:
            for event_type, obj in self.initial:
                await self.stall()
                yield encode(event_type, obj)
            if self.send_initial_end_bookmark:
                yield encode("BOOKMARK", bookmark_object(self.filter.resource, self.after_rv, initial_events_end=True))
            next_bookmark = trio.current_time() + self.bookmark_interval()
            while True:
                wake_at = min(self.deadline, next_bookmark) if self.bookmarks else self.deadline
                event = None
                ended = False
                with trio.move_on_at(wake_at):  # never yield inside a cancel scope
                    try:
                        event = await self.watcher.receive.receive()
                    except trio.EndOfChannel:
                        ended = True
                if ended:
                    if self.watcher.expired:
                        yield expired_event("The resourceVersion for the provided watch is too old.")
                    return
                now = trio.current_time()
                if event is None:
                    if now >= self.deadline:
                        return
                    delivered_up_to = self.store.rv  # the queue is empty: every event so far is sent
                    await self.stall()
                    yield encode("BOOKMARK", bookmark_object(self.filter.resource, delivered_up_to))
                    next_bookmark = trio.current_time() + self.bookmark_interval()
                    continue
                if event.rv <= self.after_rv:
                    continue
                translated = self.filter.translate(event)
                if translated is not None:
                    await self.stall()
                    yield encode(*translated)
        finally:
            self.store.unsubscribe(self.watcher)
