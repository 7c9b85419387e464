"""The live record of one actor: what the tree snapshot and the metrics read.

The supervisor owns and updates it; everyone else reads it only through snapshots.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import datetime, timezone

from pykubelet.messages.supervision import (
    ActorKind,
    ActorSnapshot,
    ActorState,
    ErrorInfo,
    MailboxStats,
    Strategy,
)

from .mailbox import Mailbox


def _rfc3339(wall: float) -> str:
    return datetime.fromtimestamp(wall, timezone.utc).isoformat(timespec="milliseconds").replace(
        "+00:00", "Z"
    )


@dataclass(eq=False)
class ActorRecord:
    name: str
    path: str
    kind: ActorKind
    state: ActorState = "stopped"
    strategy: Strategy | None = None
    restarts: int = 0
    last_error: ErrorInfo | None = None
    started_at: float | None = None  # wall clock
    mailbox: Mailbox | None = None
    # started_at as RFC 3339, and the started_at it was made from: formatting a time costs
    # more than the rest of a snapshot, which every /debug/actors and /metrics takes.
    _started_text: tuple[float, str] | None = field(default=None, repr=False)

    def mark_started(self) -> None:
        self.state = "running"
        self.started_at = time.time()

    def note_error(self, error: BaseException) -> None:
        self.last_error = ErrorInfo(
            type=type(error).__name__, message=str(error), at=_rfc3339(time.time())
        )

    def snapshot(self, children: list[ActorSnapshot]) -> ActorSnapshot:
        mailbox = self.mailbox
        return ActorSnapshot(
            name=self.name,
            path=self.path,
            kind=self.kind,
            state=self.state,
            restarts=self.restarts,
            strategy=self.strategy,
            last_error=self.last_error,
            started_at=self._started_rfc3339(),
            mailbox=(
                MailboxStats(depth=mailbox.depth, capacity=mailbox.capacity, received=mailbox.received)
                if mailbox is not None
                else None
            ),
            children=children,
        )

    def _started_rfc3339(self) -> str | None:
        started_at = self.started_at
        if started_at is None:
            return None
        text = self._started_text
        if text is None or text[0] != started_at:
            text = self._started_text = (started_at, _rfc3339(started_at))
        return text[1]
