"""In-memory storage with etcd's versioning: one global resourceVersion counter bumped by
every write, a bounded per-resource history of watch events (a watch from a version older
than the history answers 410 Expired, as the watch cache does), and live watchers fed
through trio memory channels. Single-threaded: the server's trio loop is its only user.
With a journal, every write is appended to a file and a new server process reads it back
(etcd's part in a restart of kube-apiserver)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import trio

WATCH_BUFFER = 10_000  # events queued for one slow watcher before the server drops it


@dataclass(frozen=True)
class ResourceType:
    name: str
    group: str
    version: str
    kind: str
    namespaced: bool

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def list_kind(self) -> str:
        return self.kind + "List"


@dataclass
class WatchEvent:
    rv: int
    type: str  # ADDED | MODIFIED | DELETED
    obj: dict[str, Any]
    old: dict[str, Any] | None = None


@dataclass(eq=False)
class Watcher:
    resource: str
    send: trio.MemorySendChannel
    receive: trio.MemoryReceiveChannel
    overflowed: bool = False
    expired: bool = False

    def close(self) -> None:
        self.send.close()


@dataclass
class _History:
    events: deque = field(default_factory=deque)
    dropped_up_to: int = 0  # a watch from a version below this one has lost events


class Expired(Exception):
    def __init__(self, requested: int, oldest: int) -> None:
        super().__init__(f"too old resource version: {requested} ({oldest})")
        self.requested = requested
        self.oldest = oldest


class Store:
    def __init__(self, *, history_window: int = 1000, initial_rv: int = 1, journal: Path | None = None) -> None:
        self.rv = initial_rv
        self.history_window = history_window
        self._objects: dict[str, dict[tuple[str, str], dict[str, Any]]] = {}
        self._history: dict[str, _History] = {}
        # Insertion-ordered (a dict, not a set): watchers are woken in the order they came, so
        # an in-process run on a seeded scheduler (tests/simulation) replays identically.
        self._watchers: dict[str, dict[Watcher, None]] = {}
        self._advanced = trio.Event()
        self._oldest = 0  # no watch may start below this version
        self._journal = None
        if journal is not None:
            self._replay(journal)
            self._journal = open(journal, "a")

    def _replay(self, journal: Path) -> None:
        """Read back the objects an earlier server process stored. Its watch history is
        gone, as a restarted kube-apiserver's watch cache starts at the current version: a
        watch from an older one gets 410."""
        try:
            lines = journal.read_text().splitlines()
        except FileNotFoundError:
            return
        for line in lines:
            try:
                entry = json.loads(line)
            except ValueError:
                break  # the last line, half written when the process was killed
            objects = self._objects.setdefault(entry["resource"], {})
            if entry["type"] == "DELETED":
                objects.pop(_key(entry["object"]), None)
            else:
                objects[_key(entry["object"])] = entry["object"]
            self.rv = max(self.rv, entry["rv"])
        self._oldest = self.rv

    def _write_journal(self, resource: str, event: WatchEvent) -> None:
        if self._journal is not None:
            record = {"rv": event.rv, "resource": resource, "type": event.type, "object": event.obj}
            self._journal.write(json.dumps(record) + "\n")
            self._journal.flush()  # in the kernel's hands: a SIGKILL of this process loses nothing

    def _history_of(self, resource: str) -> _History:
        return self._history.setdefault(resource, _History(dropped_up_to=self._oldest))

    # --- reads ---------------------------------------------------------------------------

    def get(self, resource: str, namespace: str, name: str) -> dict[str, Any] | None:
        obj = self._objects.get(resource, {}).get((namespace, name))
        return copy.deepcopy(obj) if obj is not None else None

    def list(self, resource: str, namespace: str | None = None) -> list[dict[str, Any]]:
        items = [
            copy.deepcopy(obj)
            for (ns, _), obj in sorted(self._objects.get(resource, {}).items())
            if namespace is None or ns == namespace
        ]
        return items

    def exists(self, resource: str, namespace: str, name: str) -> bool:
        return (namespace, name) in self._objects.get(resource, {})

    # --- writes --------------------------------------------------------------------------

    def _next_rv(self) -> int:
        self.rv += 1
        self._advanced.set()
        self._advanced = trio.Event()
        return self.rv

    def create(self, resource: str, obj: dict[str, Any]) -> dict[str, Any]:
        key = _key(obj)
        rv = self._next_rv()
        obj["metadata"]["resourceVersion"] = str(rv)
        self._objects.setdefault(resource, {})[key] = copy.deepcopy(obj)
        self._record(resource, WatchEvent(rv, "ADDED", copy.deepcopy(obj)))
        return obj

    def update(self, resource: str, obj: dict[str, Any]) -> dict[str, Any]:
        key = _key(obj)
        old = self._objects[resource][key]
        rv = self._next_rv()
        obj["metadata"]["resourceVersion"] = str(rv)
        self._objects[resource][key] = copy.deepcopy(obj)
        self._record(resource, WatchEvent(rv, "MODIFIED", copy.deepcopy(obj), old))
        return obj

    def delete(self, resource: str, namespace: str, name: str) -> dict[str, Any]:
        old = self._objects[resource].pop((namespace, name))
        rv = self._next_rv()
        final = copy.deepcopy(old)
        final["metadata"]["resourceVersion"] = str(rv)
        self._record(resource, WatchEvent(rv, "DELETED", copy.deepcopy(final), old))
        return final

    # --- watch ---------------------------------------------------------------------------

    def _record(self, resource: str, event: WatchEvent) -> None:
        self._write_journal(resource, event)
        history = self._history_of(resource)
        history.events.append(event)
        while len(history.events) > self.history_window:
            history.dropped_up_to = history.events.popleft().rv
        for watcher in list(self._watchers.get(resource, ())):
            try:
                watcher.send.send_nowait(event)
            except trio.WouldBlock:
                watcher.overflowed = True
                self.unsubscribe(watcher)
            except (trio.ClosedResourceError, trio.BrokenResourceError):
                self.unsubscribe(watcher)

    def events_since(self, resource: str, rv: int) -> list[WatchEvent]:
        """Events of a resource after rv; Expired when some of them are gone from history."""
        history = self._history_of(resource)
        if rv < history.dropped_up_to:
            raise Expired(rv, history.dropped_up_to)
        return [e for e in history.events if e.rv > rv]

    def subscribe(self, resource: str) -> Watcher:
        send, receive = trio.open_memory_channel(WATCH_BUFFER)
        watcher = Watcher(resource, send, receive)
        self._watchers.setdefault(resource, {})[watcher] = None
        return watcher

    def unsubscribe(self, watcher: Watcher) -> None:
        self._watchers.get(watcher.resource, {}).pop(watcher, None)
        watcher.close()

    async def wait_for_rv(self, rv: int, timeout: float) -> bool:
        with trio.move_on_after(timeout):
            while self.rv < rv:
                await self._advanced.wait()
        return self.rv >= rv

    def expire(self) -> int:
        """Compact every history to now: watches from any version seen so far get 410, and
        the open ones are ended (their watchers marked expired). Returns the new version."""
        rv = self._next_rv()
        for resource in set(self._history) | set(self._watchers) | set(self._objects):
            history = self._history_of(resource)
            history.events.clear()
            history.dropped_up_to = rv
        for watchers in self._watchers.values():
            for watcher in list(watchers):
                watcher.expired = True
                self.unsubscribe(watcher)
        return rv

    def dump(self) -> dict[str, list[dict[str, Any]]]:
        return {resource: self.list(resource) for resource in sorted(self._objects)}


def _key(obj: dict[str, Any]) -> tuple[str, str]:
    meta = obj["metadata"]
    return meta.get("namespace", ""), meta["name"]
