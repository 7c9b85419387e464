"""The messages a pod worker takes from its mailbox, for the pod worker (a mixin, as
publishing.py): between syncs, and while a pod waits for its start slot (start_slot.py),
where a TerminatePod or an eviction means the pod is not started at all."""

from __future__ import annotations

import logging

import trio

from pykubelet.actors.events import pod_reference
from pykubelet.messages.pod_updates import EvictedPod, PodWorkerMessage, SyncPod, TerminatePod

log = logging.getLogger("pykubelet.podworker")


class StartGivenUp(Exception):
    """A pod waiting for its start slot was deleted or evicted meanwhile: not started."""


class PodWorkerMessages:
    """Needs the worker's deps, pod, fields, mailbox, start_slot, `terminate_asked`,
    `eviction` and `updated`."""

    def _take(self, message: PodWorkerMessage) -> None:
        """A SyncPod: its spec is the newest (the next sync's); a TerminatePod sticks; an
        EvictedPod is taken once, recorded as an event."""
        if isinstance(message, TerminatePod):
            self.terminate_asked = message  # sticks: the newest spec changes nothing after it
            return
        if isinstance(message, EvictedPod) and self.eviction is None and self.pod is not None:
            self.eviction = message.eviction
            log.warning("evicting pod: %s", message.eviction.message, extra=self.fields)
            self.deps.events.record(pod_reference(self.pod, None), "Warning", message.eviction.reason,
                                    message.eviction.message)
        if isinstance(message, SyncPod):
            if self.pod is not None and message.pod != self.pod:
                self.updated = True
            self.pod = message.pod

    def _drain(self) -> None:
        while True:
            try:
                self._take(self.mailbox.receive_nowait())
            except trio.WouldBlock:
                return

    def _not_to_start(self) -> bool:
        return self.terminate_asked is not None or self.eviction is not None

    async def _take_start_slot(self) -> None:
        """Wait for a start slot, reading the mailbox meanwhile (hundreds of pods may be
        waiting): a pod deleted or evicted before its turn is not started, its wait ends
        with StartGivenUp and the worker goes on to stop it (Go's pod workers cancel a sync
        in flight when a kill is asked for). A newer spec read meanwhile is the next sync's."""
        async def read_one() -> None:
            self._take(await self.mailbox.receive())

        if not await self.start_slot.take_unless(read_one, self._not_to_start):
            log.info("pod not started: %s before its turn to start came",
                     "deleted" if self.terminate_asked is not None else "evicted", extra=self.fields)
            raise StartGivenUp
