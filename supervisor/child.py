"""A supervised child: its spec and record, its current incarnation (the cancel scope its
supervisor stops it by), and the ActorContext an incarnation is started with."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import trio

from .mailbox import Mailbox
from .record import ActorRecord
from .spec import ChildSpec

if TYPE_CHECKING:
    from .supervisor import Supervisor


class ActorContext:
    """What an actor incarnation gets from its supervisor."""

    def __init__(self, supervisor: Supervisor, child: Child, mailbox: Mailbox | None):
        self.name = child.spec.name
        self.path = child.record.path
        self.mailbox = mailbox
        self.registry = supervisor.registry
        self._supervisor = supervisor
        self._child = child

    def shutdown_scope(self) -> trio.CancelScope:
        """A shielded scope for cleanup after being stopped, cut off at the child's
        shutdown timeout. Use it in a `finally:` around cleanup that must await."""
        return trio.CancelScope(
            shield=True, deadline=trio.current_time() + self._child.spec.shutdown
        )

    def attach_supervisor(self, supervisor: Supervisor) -> None:
        """Called by a nested supervisor so the tree can be walked through it."""
        self._child.incarnation.supervisor = supervisor


@dataclass(eq=False)
class Incarnation:
    number: int
    scope: trio.CancelScope | None = None
    done: trio.Event = field(default_factory=trio.Event)
    started_at: float = 0.0  # trio clock
    stop_requested: bool = False
    injected: BaseException | None = None
    supervisor: Supervisor | None = None


@dataclass(eq=False)
class Child:
    spec: ChildSpec
    record: ActorRecord
    dynamic: bool
    incarnation: Incarnation | None = None
    restart_pending: bool = False
    consecutive_failures: int = 0
    restarts: deque[float] = field(default_factory=deque)  # within the intensity period, when counted per child

    @property
    def running(self) -> bool:
        return self.incarnation is not None and not self.incarnation.done.is_set()
