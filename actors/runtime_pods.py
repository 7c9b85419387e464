"""The managed pods in the runtime as the PLEG sees them: an index of sandboxes and
containers by id that one runtime event changes at a cost that does not grow with the pods
the node runs, and RuntimePods, the PLEG's view shared with the sync loop and pod workers.
"""

from __future__ import annotations

from collections import Counter

import trio

from pykubelet.messages.runtime import PodRuntimeStatus, Relist, RelistedContainer, RelistedSandbox

RuntimeItem = RelistedSandbox | RelistedContainer


class RuntimeIndex:
    """Sandboxes and containers by id, with per-pod counts kept as entries come and go, so
    that "does the runtime hold anything of this pod" and the running gauges cost O(1) and
    a Relist is built only when a reader asks for one after a change."""

    def __init__(self, view: Relist | None = None) -> None:
        sandboxes, containers = (view.sandboxes, view.containers) if view else ((), ())
        self.sandboxes: dict[str, RelistedSandbox] = {s.id: s for s in sandboxes}
        self.containers: dict[str, RelistedContainer] = {c.id: c for c in containers}
        # pod uid -> its sandboxes and containers
        self._per_pod: Counter[str] = Counter(s.pod_uid for s in self.sandboxes.values())
        self._per_pod.update(c.pod_uid for c in self.containers.values())
        # pod uid -> its ready sandboxes (none: no key)
        self._ready: Counter[str] = Counter(s.pod_uid for s in self.sandboxes.values() if s.ready)
        self.states: Counter[str] = Counter(c.state for c in self.containers.values())  # state -> containers
        self._relist: Relist | None = view

    def put(self, item: RuntimeItem) -> None:
        """Add or replace the sandbox or container of item.id."""
        self.drop(item.id)
        if isinstance(item, RelistedSandbox):
            self.sandboxes[item.id] = item
            if item.ready:
                self._ready[item.pod_uid] += 1
        else:
            self.containers[item.id] = item
            self.states[item.state] += 1
        self._per_pod[item.pod_uid] += 1
        self._relist = None

    def drop(self, item_id: str) -> None:
        item = self.sandboxes.pop(item_id, None) or self.containers.pop(item_id, None)
        if item is None:
            return
        if isinstance(item, RelistedSandbox):
            if item.ready:
                _take_one(self._ready, item.pod_uid)
        else:
            _take_one(self.states, item.state)
        _take_one(self._per_pod, item.pod_uid)
        self._relist = None

    def holds(self, pod_uid: str) -> bool:
        return pod_uid in self._per_pod

    def shows(self, status: PodRuntimeStatus) -> bool:
        """True when the index holds exactly the sandboxes and containers of `status`'s pod:
        the same ids, each sandbox ready or not as there, each container in the same state.
        O(the pod's own sandboxes and containers)."""
        if self._per_pod.get(status.uid, 0) != len(status.sandboxes) + len(status.containers):
            return False
        for sandbox in status.sandboxes:
            seen = self.sandboxes.get(sandbox.id)
            if seen is None or seen.pod_uid != status.uid or seen.ready != (sandbox.state == "ready"):
                return False
        for container in status.containers:
            listed = self.containers.get(container.id)
            if listed is None or listed.pod_uid != status.uid or listed.state != container.state:
                return False
        return True

    def ready_pods(self) -> int:
        """Pods with a ready sandbox."""
        return len(self._ready)

    def relist(self) -> Relist:
        if self._relist is None:
            self._relist = Relist(sandboxes=list(self.sandboxes.values()), containers=list(self.containers.values()))
        return self._relist


def _take_one(counts: Counter[str], key: str) -> None:
    counts[key] -= 1
    if counts[key] <= 0:
        del counts[key]


class RuntimePods:
    """The managed pods in the runtime as the PLEG last saw them (the latest successful
    relist, kept current by the runtime's events), for readers outside the PLEG.

    It also spares a pod worker's sync the read of its pod from the runtime (Go's pod
    workers sync from the PLEG's pod cache the same way) in two cases: the runtime holds
    nothing of the pod (the latest relist saw nothing of it, and no pod worker has created
    a sandbox or container of it since that relist's list calls began: sandboxes and
    containers are made by pod workers alone, and whatever existed before the relist is in
    it), or the worker's last read still stands (`unchanged_since`).
    """

    def __init__(self) -> None:
        self.index: RuntimeIndex | None = None  # the PLEG's own, changed in place by its events
        self._relist_began: float | None = None  # trio time, of the relist behind `index`
        self._created: dict[str, float] = {}  # pod uid -> when a worker last created in it

    @property
    def latest(self) -> Relist | None:
        return self.index.relist() if self.index is not None else None

    @latest.setter
    def latest(self, view: Relist | None) -> None:
        self.index = RuntimeIndex(view) if view is not None else None

    def relisted(self, view: Relist | RuntimeIndex, began: float) -> None:
        """A relist whose list calls began at `began` (trio time) saw `view`."""
        self.index = view if isinstance(view, RuntimeIndex) else RuntimeIndex(view)
        self._relist_began = began
        # What was created before the relist began is in it, or gone since.
        self._created = {uid: at for uid, at in self._created.items() if at >= began}

    def creating(self, pod_uid: str) -> None:
        """Say so before a CRI call that creates a sandbox or container of `pod_uid`."""
        self._created[pod_uid] = trio.current_time()

    def holds_nothing_of(self, pod_uid: str) -> bool:
        """True when the runtime is known to hold no sandbox or container of `pod_uid`;
        False when it may hold some (or nothing has been relisted yet)."""
        if self.index is None or self._relist_began is None or pod_uid in self._created:
            return False
        return not self.index.holds(pod_uid)

    def unchanged_since(self, status: PodRuntimeStatus, synced_at: float) -> bool:
        """True when a pod worker whose last sync ended at `synced_at` (trio time) may sync
        from `status`, its last read of the pod, made after its last change to the runtime:
        the latest relist began after that sync ended (Go: a pod cache entry newer than the
        worker's last sync) and shows the pod's sandboxes and containers as `status` has
        them (the runtime's events since are applied to the view too).

        The fields a worker reads beyond the list calls' (exit codes, reasons, messages,
        start and finish times, the sandbox IP) change only with a container's or sandbox's
        state, and a state only moves forward (created, running, exited; ready, not ready),
        so a view that began after the read and shows the same states shows the same pod.
        """
        if self.index is None or self._relist_began is None or self._relist_began <= synced_at:
            return False
        return status.uid not in self._created and self.index.shows(status)
