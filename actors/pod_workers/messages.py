"""The messages a pod worker takes from its mailbox, for the pod worker (a mixin, as
publishing.py): between syncs, and while a pod's start waits (for its start slot in
start_slot.py, for an image pull), where a TerminatePod or an eviction means the pod is not
started at all and the wait is given up."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

import outcome
import trio

from pykubelet.actors.events import pod_reference
from pykubelet.messages.pod_updates import EvictedPod, PodWorkerMessage, SyncPod, TerminatePod

log = logging.getLogger("pykubelet.podworker")

T = TypeVar("T")


class StartGivenUp(Exception):
    """A pod whose start was waiting (for its start slot, an image pull) was deleted or
    evicted meanwhile: the wait was given up, the rest of the start is not made."""


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

    async def _unless_stopped(self, wait: Callable[[], Awaitable[T]]) -> T:
        """await wait() while reading the mailbox: a TerminatePod or an eviction read
        meanwhile cancels it and raises StartGivenUp, so that the worker goes on to stop
        the pod (Go's pod workers cancel a sync in flight when a kill is asked for). A
        newer spec read meanwhile is the next sync's (PodWorker.sync)."""
        if self.mailbox is None:
            return await wait()  # driven outside an actor (tests): no messages to read
        got: outcome.Outcome | None = None  # None: wait() was cancelled

        async def read() -> None:
            while not self._not_to_start():
                self._take(await self.mailbox.receive())
            nursery.cancel_scope.cancel()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(read)
            try:
                got = outcome.Value(await wait())
            except Exception as error:  # raised as it is below, not in the nursery's ExceptionGroup
                got = outcome.Error(error)
            nursery.cancel_scope.cancel()
        if self._not_to_start():
            log.info("start given up: the pod was %s while the start waited (for a start slot or an image)",
                     "deleted" if self.terminate_asked is not None else "evicted", extra=self.fields)
            raise StartGivenUp
        assert got is not None  # only a give-up above cancels wait() and goes on
        return got.unwrap()

    async def _take_start_slot(self) -> None:
        """Wait for a start slot (hundreds of pods may be waiting), unless stopped."""
        if self.start_slot.take_nowait():
            await trio.lowlevel.checkpoint()
            return
        # A slot taken in the same moment as a give-up is given back when the sync ends.
        await self._unless_stopped(self.start_slot.take)
