"""A pod worker's place among the pods starting at once on the node (PARALLEL_POD_STARTS in
deps.py): taken right before the pod's RunPodSandbox, given back when the sync ends, or
earlier when the start waits on something slower than the runtime's start calls (an image
pull, a postStart hook): the rest of that sync's starts then go on outside the bound."""

from __future__ import annotations

import trio


class StartSlot:
    def __init__(self, limiter: trio.CapacityLimiter | None) -> None:
        self._limiter = limiter  # None: starts are not bounded
        self.held = False

    def take_nowait(self) -> bool:
        """Take a slot if one is free now (True also when held or unbounded)."""
        if self._limiter is None or self.held:
            return True
        try:
            self._limiter.acquire_on_behalf_of_nowait(self)
        except trio.WouldBlock:
            return False
        self.held = True
        return True

    async def take(self) -> None:
        """Wait for a slot (a checkpoint, also when held or unbounded)."""
        if self._limiter is None or self.held:
            await trio.lowlevel.checkpoint()
            return
        await self._limiter.acquire_on_behalf_of(self)
        self.held = True

    def leave(self) -> None:
        """Give the slot back, if held; never blocks, so a `finally` may call it."""
        if self.held:
            self.held = False
            self._limiter.release_on_behalf_of(self)
