"""The supervision errors: what an operator's command on the tree raises, a supervisor that
gave up (escalated to its parent), and the crash an operator injects into an actor."""

from __future__ import annotations


class SupervisorError(Exception):
    pass


class NotRunning(SupervisorError):
    """The actor (or the supervisor asked to act on it) is not running right now."""


class RestartIntensityExceeded(SupervisorError):
    """A supervisor gave up: its children needed more restarts than its intensity allows."""

    def __init__(
        self, path: str, restarts: int, period: float, child: str, cause: BaseException | None,
        *, per_child: bool = False,
    ):
        self.path = path
        self.child = child
        self.cause = cause
        reason = f"{type(cause).__name__}: {cause}" if cause is not None else "exited"
        whose = f"restarts of {child}" if per_child else "restarts"
        last = "the last" if per_child else f"the last of {child}"
        super().__init__(f"supervisor {path} gave up: {restarts} {whose} within {period:g}s, {last} ({reason})")


class InjectedCrash(Exception):
    """The error an actor dies of when an operator crashes it through the admin socket."""
