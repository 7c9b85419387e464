"""The supervision tree as it crosses the wire: one ActorSnapshot per actor.

The supervisor builds these from its live records; the admin socket serves them as JSON at
/debug/actors and pykubelet-inspect decodes them. The JSON shape is the operator contract.
"""

from __future__ import annotations

from typing import Literal

import msgspec

ActorKind = Literal["supervisor", "worker"]
ActorState = Literal["running", "restarting", "stopped", "failed"]
Strategy = Literal["one_for_one", "one_for_all", "rest_for_one"]


# gc=False (all three): a snapshot is a tree built leaves first, so it can hold no reference
# cycle for the collector to find; untracked, the thousand structs of one /debug/actors
# answer or /metrics scrape at 500 pods no longer set off collections that cost twice the
# answer itself (bench/relist.py).


class ErrorInfo(msgspec.Struct, frozen=True, gc=False):
    """The last error an actor died of."""

    type: str
    message: str
    at: str  # RFC 3339, UTC


class MailboxStats(msgspec.Struct, frozen=True, gc=False):
    depth: int
    capacity: int
    received: int


class ActorSnapshot(msgspec.Struct, frozen=True, gc=False):
    name: str
    path: str
    kind: ActorKind
    state: ActorState
    restarts: int
    strategy: Strategy | None = None
    last_error: ErrorInfo | None = None
    started_at: str | None = None
    mailbox: MailboxStats | None = None
    children: list[ActorSnapshot] = []

    def walk(self):
        """This actor and every actor below it, depth first in start order."""
        yield self
        for child in self.children:
            yield from child.walk()
