"""pykubelet under systemd (Type=notify): READY=1 once the actor tree is up and the runtime
answered, STATUS= when what an operator sees in `systemctl status` changes, WATCHDOG=1 every
$WATCHDOG_USEC/2 while the root supervisor answers and the sync loop is healthy (a wedged
tree stops the pings and systemd restarts the daemon), STOPPING=1 on SIGTERM.

Without $NOTIFY_SOCKET nothing here runs. The notifier watches the tree from outside it,
reading the same boards as healthz.
"""

from __future__ import annotations

import logging
from typing import Awaitable, Callable, Mapping

import trio

from pykubelet.actors.health import Check, HealthBoard
from pykubelet.actors.pod_statuses import PodStatuses
from pykubelet.actors.runtime_link import CHECK as RUNTIME_CHECK
from pykubelet.actors.sync_loop import SYNC_LOOP_CHECK
from pykubelet.ports.systemd_notify import NotifySocket, WatchdogConfigError, watchdog_interval
from pykubelet.supervisor import NotRunning, Supervisor

from .config import ConfigurationError

log = logging.getLogger("pykubelet.systemd")

STATUS_PERIOD = 1.0  # how often the state is looked at for a STATUS= change
FIRST_STATUS_WAIT = 5.0  # after the runtime's handshake, how long READY waits for its first Status


def service_status(running_pods: int, checks: list[Check]) -> str:
    """The STATUS= line: "3 pods running, runtime ready", then any failing check."""
    by_name = {check.name: check for check in checks}
    runtime = by_name.get(RUNTIME_CHECK)
    pods = f"{running_pods} pod{'' if running_pods == 1 else 's'} running"
    if runtime is None:
        state = "runtime not connected"
    elif runtime.ok:
        state = "runtime ready"
    else:
        state = f"runtime not ready: {runtime.detail}"
    failing = sorted(check.name for check in checks if not check.ok and check.name != RUNTIME_CHECK)
    return f"{pods}, {state}" + (f"; failing: {', '.join(failing)}" if failing else "")


class TreeStarted:
    """A task_status for Daemon.run: set once the root supervisor started its children."""

    def __init__(self) -> None:
        self.event = trio.Event()

    def started(self, value: object = None) -> None:
        self.event.set()


class ServiceNotifier:
    """Tells systemd how the daemon is doing, through `socket`."""

    def __init__(
        self,
        socket: NotifySocket,
        *,
        root: Supervisor,
        health: HealthBoard,
        statuses: PodStatuses,
        runtime_answered: Callable[[], Awaitable[None]],
        watchdog: float | None,
        status_period: float = STATUS_PERIOD,
    ) -> None:
        self.socket = socket
        self.root = root
        self.health = health
        self.statuses = statuses
        self.runtime_answered = runtime_answered
        self.watchdog = watchdog
        self.status_period = status_period
        self._status = ""
        self._unhealthy: str | None = None
        self._stopping = False  # after STOPPING=1 the status line stays as it was told

    async def run(self, tree_started: TreeStarted) -> None:
        """From the tree's start until cancelled: the watchdog, STATUS= changes (also while
        the runtime is awaited: `systemctl status` says what the start waits for), and
        READY=1 once the runtime answered."""
        await tree_started.event.wait()
        async with trio.open_nursery() as nursery:
            if self.watchdog is not None:
                log.info("systemd watchdog: WATCHDOG=1 every %gs while the tree is healthy", self.watchdog)
                nursery.start_soon(self._feed_watchdog)
            nursery.start_soon(self._report_status)
            await self.runtime_answered()
            # The link asks Status right after the handshake: the READY line's STATUS=
            # should say what it answered, but READY does not wait on a runtime not ready.
            with trio.move_on_after(FIRST_STATUS_WAIT):
                while not any(c.name == RUNTIME_CHECK and c.ok for c in self.health.checks()):
                    await trio.sleep(0.05)
            self._status = self._current_status()
            self.socket.notify("READY=1", f"STATUS={self._status}")
            log.info("told systemd READY=1: %s", self._status)

    async def _report_status(self) -> None:
        while True:
            status = self._current_status()
            if status != self._status and not self._stopping:
                self._status = status
                self.socket.notify(f"STATUS={status}")
            await trio.sleep(self.status_period)

    def stopping(self, why: str) -> None:
        self._stopping = True
        self.socket.notify("STOPPING=1", f"STATUS=stopping: {why}")

    def failed(self, why: str) -> None:
        self.socket.notify(f"STATUS={why}")

    def _current_status(self) -> str:
        running = sum(1 for pod in self.statuses.pods() if pod.status.phase == "Running")
        return service_status(running, self.health.checks())

    async def _feed_watchdog(self) -> None:
        assert self.watchdog is not None
        while True:
            due = trio.current_time() + self.watchdog
            problem = await self.unhealthy()
            if problem is None:
                self.socket.notify("WATCHDOG=1")
                if self._unhealthy is not None:
                    log.info("healthy again: feeding the systemd watchdog")
            elif problem != self._unhealthy:
                log.error("not feeding the systemd watchdog (systemd restarts the daemon if this lasts): %s", problem)
            self._unhealthy = problem
            await trio.sleep_until(due)

    async def unhealthy(self) -> str | None:
        """Why the tree is not healthy now (None: it is): the root supervisor does not
        answer within half a watchdog period, or the sync loop's check fails (Go's watchdog
        checks its syncloop health; a sync loop stuck in one message fails it after
        max(2 x --sync-frequency, 5 min))."""
        assert self.watchdog is not None
        with trio.move_on_after(self.watchdog / 2):
            try:
                await self.root.ping()
            except NotRunning:
                return "the root supervisor is not running"
            sync_loop = next((c for c in self.health.checks() if c.name == SYNC_LOOP_CHECK), None)
            if sync_loop is None:
                return "the sync loop has not reported its health"
            return None if sync_loop.ok else f"sync loop: {sync_loop.detail}"
        return f"the root supervisor did not answer within {self.watchdog / 2:g}s"


def notifier_socket(environ: Mapping[str, str] | None = None) -> tuple[NotifySocket | None, float | None]:
    """$NOTIFY_SOCKET and the watchdog period; a bad $WATCHDOG_USEC is a ConfigurationError
    (the Go kubelet refuses to start on it too)."""
    socket = NotifySocket.from_environment(environ)
    if socket is None:
        return None, None
    try:
        return socket, watchdog_interval(environ)
    except WatchdogConfigError as error:
        socket.close()
        raise ConfigurationError(str(error)) from None
