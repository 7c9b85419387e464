"""Child specs and supervisor settings: plain data, as in OTP.

A ChildSpec says how to start an actor and what to do when it ends; RestartIntensity and
RestartBackoff say how much failure a supervisor absorbs before it gives up.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Awaitable, Callable, Literal

from .mailbox import MailboxSpec

if TYPE_CHECKING:
    from .supervisor import ActorContext

Restart = Literal["permanent", "transient", "temporary"]
"""permanent: always restarted; transient: restarted only after a crash;
temporary: never restarted (and removed from the tree when it ends)."""


@dataclass(frozen=True)
class ChildSpec:
    name: str
    start: Callable[[ActorContext], Awaitable[None]]
    restart: Restart = "permanent"
    # Seconds the actor's cleanup may take once it is told to stop (see
    # ActorContext.shutdown_scope); then the cleanup is cancelled too.
    shutdown: float = 5.0
    mailbox: MailboxSpec | None = None
    kind: Literal["worker", "supervisor"] = "worker"

    def __post_init__(self) -> None:
        if not self.name or "/" in self.name:
            raise ValueError(f"child name {self.name!r}: must be non-empty without '/'")
        if self.shutdown < 0:
            raise ValueError(f"child {self.name}: shutdown must be >= 0 seconds")


@dataclass(frozen=True)
class RestartIntensity:
    """More than max_restarts restarts within period seconds: the supervisor gives up.

    Defaults for a node agent: a subsystem that needs ten restarts in half a minute is
    broken, not unlucky, and restarting its parent (or, at the root, the daemon under
    systemd) is the better cure; fewer would let one flapping runtime connection take
    the whole kubelet down.

    per_child counts each child's restarts on its own: a supervisor of distinct
    subsystems gives up when one of them crash-loops, not when several have each crashed
    once in a while (isolated crashes). Without it (the default, as in OTP) all the
    children's restarts count together: right for many children of one kind, where many
    failing at once is the systemic sign (the pod workers).
    """

    max_restarts: int = 10
    period: float = 30.0
    per_child: bool = False


@dataclass(frozen=True)
class RestartBackoff:
    """Delay before restarting a child that keeps failing soon after it starts.

    The first restart is immediate; each further failure that comes less than reset_after
    seconds after the child started doubles the delay from initial up to maximum, so a
    child that fails at once does not spin the CPU while intensity counts its restarts.
    """

    initial: float = 0.01
    maximum: float = 1.0
    reset_after: float = 10.0

    def delay(self, consecutive_failures: int) -> float:
        if consecutive_failures <= 1:
            return 0.0
        # The exponent is capped: a streak of thousands of failures must not overflow.
        return min(self.initial * 2.0 ** min(consecutive_failures - 2, 64), self.maximum)


NO_BACKOFF = RestartBackoff(initial=0.0, maximum=0.0)
