"""The supervisor: starts its children in order, restarts them by strategy, gives up when
restarts exceed its intensity, and stops them in reverse order.

Each child incarnation runs in a shielded cancel scope of its own, so nothing but its
supervisor stops it, and the supervisor can stop children one at a time, last started
first, even when it is itself being cancelled. Everything the supervisor decides happens
in one loop that reads child exits and operator commands from one channel.
"""

from __future__ import annotations

import logging
import math
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import trio

from pykubelet.messages.supervision import ActorSnapshot, Strategy

from .child import ActorContext, Child, Incarnation
from .errors import InjectedCrash, NotRunning, RestartIntensityExceeded, SupervisorError
from .mailbox import Registry
from .record import ActorRecord
from .spec import ChildSpec, Restart, RestartBackoff, RestartIntensity

log = logging.getLogger("pykubelet.supervisor")


@dataclass(eq=False)
class _Exited:
    child: Child
    incarnation: Incarnation
    error: BaseException | None


@dataclass(eq=False)
class _RestartDue:
    children: list[Child]


@dataclass(eq=False)
class _Command:
    action: Callable[[], Any]
    done: trio.Event = field(default_factory=trio.Event)
    result: Any = None
    error: BaseException | None = None


class Supervisor:
    def __init__(
        self,
        name: str,
        children: Sequence[ChildSpec] = (),
        *,
        strategy: Strategy = "one_for_one",
        intensity: RestartIntensity = RestartIntensity(),
        backoff: RestartBackoff = RestartBackoff(),
        registry: Registry | None = None,
        path: str | None = None,
        record: ActorRecord | None = None,
    ) -> None:
        self.name = name
        self.path = path or name
        self.strategy = strategy
        self.intensity = intensity
        self.backoff = backoff
        self.registry = registry if registry is not None else Registry()
        self.record = record or ActorRecord(name=name, path=self.path, kind="supervisor")
        self.record.strategy = strategy
        self._specs = list(children)
        names = [spec.name for spec in self._specs]
        if len(set(names)) != len(names):
            raise ValueError(f"supervisor {self.path}: duplicate child names in {names}")
        # By name, in start order: has_child and lookups are asked per pod sync, so a scan
        # would make each one cost as much as the pods the node runs.
        self._children: dict[str, Child] = {}
        self._restarts: deque[float] = deque()
        self._events_in, self._events = trio.open_memory_channel[Any](math.inf)
        self._nursery: trio.Nursery | None = None

    # -- running -------------------------------------------------------------------

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Start the children in order and supervise them until cancelled.

        Raises RestartIntensityExceeded when the children fail too often; either way the
        children are stopped in reverse start order before this returns.
        """
        self.record.mark_started()
        gave_up: RestartIntensityExceeded | None = None
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            try:
                # Every mailbox exists before any child starts, so an actor may address a
                # sibling that starts after it.
                for spec in self._specs:
                    self._add(spec, dynamic=False)
                for child in list(self._children.values()):
                    await self._start(child)
                task_status.started(self)
                await self._loop()
            except RestartIntensityExceeded as exc:
                gave_up = exc  # raised below, outside the nursery, unwrapped
            finally:
                with trio.CancelScope(shield=True):
                    await self._stop_all()
                # Dynamic children end with this supervisor (a new one starts with its specs
                # only): their addresses go too, or the registry keeps one for every pod
                # worker that lived when the pod workers' supervisor was restarted.
                for child in [c for c in self._children.values() if c.dynamic]:
                    self._remove(child)
                self._nursery = None
                nursery.cancel_scope.cancel()  # pending back-off timers
        if gave_up is not None:
            log.error("%s", gave_up, extra={"actor": self.path})
            raise gave_up

    @classmethod
    def child_spec(
        cls,
        name: str,
        children: Sequence[ChildSpec],
        *,
        strategy: Strategy = "one_for_one",
        intensity: RestartIntensity = RestartIntensity(),
        backoff: RestartBackoff = RestartBackoff(),
        restart: Restart = "permanent",
    ) -> ChildSpec:
        """A ChildSpec that runs a fresh supervisor of these children in each incarnation."""

        async def start(ctx: ActorContext) -> None:
            supervisor = cls(
                name,
                children,
                strategy=strategy,
                intensity=intensity,
                backoff=backoff,
                registry=ctx.registry,
                path=ctx.path,
                record=ctx._child.record,
            )
            ctx.attach_supervisor(supervisor)
            await supervisor.run()

        # A supervisor's own shutdown is the sum of its children's; it is not cut short.
        return ChildSpec(
            name=name, start=start, restart=restart, shutdown=math.inf, kind="supervisor"
        )

    async def _loop(self) -> None:
        async for event in self._events:
            if isinstance(event, _Exited):
                await self._on_exit(event)
            elif isinstance(event, _RestartDue):
                await self._on_restart_due(event)
            else:
                await self._on_command(event)

    # -- children ------------------------------------------------------------------

    def _add(self, spec: ChildSpec, *, dynamic: bool) -> Child:
        record = ActorRecord(name=spec.name, path=f"{self.path}/{spec.name}", kind=spec.kind)
        child = Child(spec=spec, record=record, dynamic=dynamic)
        if spec.mailbox is not None:
            record.mailbox = self.registry.open(record.path, spec.mailbox)
        self._children[spec.name] = child
        return child

    def _remove(self, child: Child) -> None:
        del self._children[child.spec.name]
        if child.spec.mailbox is not None:
            self.registry.close(child.record.path)

    def _find(self, name: str) -> Child:
        child = self._children.get(name)
        if child is not None:
            return child
        raise LookupError(f"{self.path} has no child named {name!r}")

    async def _start(self, child: Child) -> None:
        number = child.incarnation.number + 1 if child.incarnation else 1
        incarnation = Incarnation(number=number, started_at=trio.current_time())
        child.incarnation = incarnation
        child.restart_pending = False
        mailbox = child.record.mailbox
        if mailbox is not None and not mailbox.spec.durable and number > 1:
            mailbox.discard_pending()  # what was sent to the dead incarnation dies with it
        ctx = ActorContext(self, child, mailbox)
        assert self._nursery is not None
        # Shielded: a supervisor cancelled right now (SIGTERM, its parent stopping it) must
        # still hand the incarnation over to its nursery. Unshielded, trio leaves a task
        # whose start() caller was cancelled in the caller's care, and this one, shielded
        # itself, would never end: the tree would never stop. The handover does not block.
        with trio.CancelScope(shield=True):
            await self._nursery.start(self._run_incarnation, child, incarnation, ctx)

    async def _run_incarnation(
        self, child: Child, incarnation: Incarnation, ctx: ActorContext, task_status
    ) -> None:
        error: BaseException | None = None
        try:
            try:
                # Shielded: only this supervisor stops its children, one at a time, in order.
                with trio.CancelScope(shield=True) as scope:
                    incarnation.scope = scope
                    child.record.mark_started()
                    task_status.started()
                    # It holds trio's start-up nursery (about 1.2 kB) for as long as the
                    # child runs: one for every pod worker and probe worker.
                    del task_status
                    await child.spec.start(ctx)
            # Let it crash: the supervisor decides what follows. Caught outside the scope: an
            # error raised beside the child's own cancellation (a group of it and Cancelled)
            # is an Exception only once the scope has taken its Cancelled out.
            except Exception as exc:
                error = exc
        finally:
            # Whatever escaped, the incarnation is over: a supervisor stopping it must not
            # wait forever.
            if incarnation.injected is not None:
                error = incarnation.injected
            incarnation.done.set()
            self._events_in.send_nowait(_Exited(child, incarnation, error))

    async def _stop(self, child: Child) -> None:
        incarnation = child.incarnation
        child.restart_pending = False
        if incarnation is None or incarnation.done.is_set():
            return
        incarnation.stop_requested = True
        assert incarnation.scope is not None
        incarnation.scope.cancel()
        with trio.move_on_after(child.spec.shutdown + 1.0) as overdue:
            await incarnation.done.wait()
        if overdue.cancelled_caught:
            log.warning(
                "actor still cleaning up after its shutdown timeout; waiting",
                extra={"actor": child.record.path, "shutdown_timeout": child.spec.shutdown},
            )
            await incarnation.done.wait()
        child.record.state = "stopped"

    async def _stop_all(self) -> None:
        for child in reversed(list(self._children.values())):
            await self._stop(child)

    # -- exits and restarts --------------------------------------------------------

    async def _on_exit(self, event: _Exited) -> None:
        child, incarnation, error = event.child, event.incarnation, event.error
        if incarnation.stop_requested or child.incarnation is not incarnation:
            return  # we stopped it ourselves; whoever asked decides what follows
        record = child.record
        ran_for = trio.current_time() - incarnation.started_at
        if ran_for >= self.backoff.reset_after:
            child.consecutive_failures = 0
        child.consecutive_failures += 1
        if error is not None:
            record.note_error(error)
            # A traceback for the first failure of a streak; one line for the rest.
            first = child.consecutive_failures == 1 and not isinstance(error, InjectedCrash)
            log.error(
                "actor crashed: %s: %s",
                type(error).__name__,
                error,
                extra={"actor": record.path, "consecutive_failures": child.consecutive_failures},
                exc_info=error if first else None,
            )
        restart = child.spec.restart == "permanent" or (
            child.spec.restart == "transient" and error is not None
        )
        if not restart:
            record.state = "failed" if error is not None else "stopped"
            if child.spec.restart == "temporary" or child.dynamic:
                self._remove(child)
            return
        self._count_restart(child, error)
        delay = self.backoff.delay(child.consecutive_failures)
        group = self._restart_group(child)
        for other in reversed(group):
            if other is not child:
                await self._stop(other)
        for member in group:
            member.restart_pending = True
            member.record.state = "restarting"
        if delay > 0:
            log.info("restarting in %.3gs", delay, extra={"actor": record.path})
            assert self._nursery is not None
            self._nursery.start_soon(self._restart_after, delay, group)
        else:
            await self._on_restart_due(_RestartDue(group))

    def _count_restart(self, child: Child, error: BaseException | None) -> None:
        now = trio.current_time()
        restarts = child.restarts if self.intensity.per_child else self._restarts
        restarts.append(now)
        while restarts and restarts[0] <= now - self.intensity.period:
            restarts.popleft()
        if len(restarts) > self.intensity.max_restarts:
            raise RestartIntensityExceeded(
                self.path, len(restarts), self.intensity.period, child.record.path, error,
                per_child=self.intensity.per_child,
            )

    def _restart_group(self, child: Child) -> list[Child]:
        """The children a crash of `child` restarts, in start order."""
        if self.strategy == "one_for_one":
            return [child]
        if self.strategy == "one_for_all":
            return list(self._children.values())
        children = list(self._children.values())
        return children[children.index(child):]  # rest_for_one

    async def _restart_after(self, delay: float, group: list[Child]) -> None:
        await trio.sleep(delay)
        self._events_in.send_nowait(_RestartDue(group))

    async def _on_restart_due(self, event: _RestartDue) -> None:
        for child in event.children:
            # A child stopped or removed meanwhile is no longer ours to restart.
            if child.restart_pending and self._children.get(child.spec.name) is child:
                child.record.restarts += 1
                await self._start(child)

    # -- commands from outside the loop --------------------------------------------

    async def _call(self, action: Callable[[], Any]) -> Any:
        if self._nursery is None:
            raise NotRunning(f"supervisor {self.path} is not running")
        command = _Command(action)
        self._events_in.send_nowait(command)
        await command.done.wait()
        if command.error is not None:
            raise command.error
        return command.result

    async def _on_command(self, command: _Command) -> None:
        try:
            command.result = await command.action()
        except Exception as exc:
            command.error = exc
        finally:
            command.done.set()

    async def start_child(self, spec: ChildSpec) -> str:
        """Add a dynamic child at the end of the start order and start it; its path."""

        async def action() -> str:
            if spec.name in self._children:
                raise SupervisorError(f"{self.path} already has a child named {spec.name!r}")
            child = self._add(spec, dynamic=True)
            await self._start(child)
            return child.record.path

        return await self._call(action)

    async def stop_child(self, name: str) -> None:
        """Stop a child and remove it from the tree."""

        async def action() -> None:
            child = self._find(name)
            await self._stop(child)
            self._remove(child)

        await self._call(action)

    async def restart_child(self, name: str) -> None:
        """Stop a child and start a new incarnation (an operator's restart: it is counted
        in the child's restarts, not against the supervisor's intensity)."""

        async def action() -> None:
            child = self._find(name)
            await self._stop(child)
            child.record.state = "restarting"
            child.record.restarts += 1
            await self._start(child)

        await self._call(action)

    async def crash_child(self, name: str) -> None:
        """Make a child die of InjectedCrash, as if it had crashed by itself."""

        async def action() -> None:
            child = self._find(name)
            incarnation = child.incarnation
            if not child.running or incarnation is None or incarnation.scope is None:
                raise NotRunning(f"{child.record.path} is not running")
            incarnation.injected = InjectedCrash(
                f"{child.record.path} crashed on purpose (fault injection)"
            )
            incarnation.scope.cancel()

        await self._call(action)

    async def ping(self) -> None:
        """Return once this supervisor's decision loop has taken a command: it does not while
        the loop is stuck (a child that does not stop, say), which is what a watchdog asks."""

        async def action() -> None:
            return None

        await self._call(action)

    # -- reading the tree ----------------------------------------------------------

    def locate(self, path: str) -> tuple[Supervisor, str]:
        """The supervisor that owns the actor at `path`, and the actor's name there."""
        parts = path.strip("/").split("/")
        if parts[0] != self.name or len(parts) < 2:
            raise LookupError(f"{path!r} is not a child path under {self.path}")
        supervisor = self
        for depth, name in enumerate(parts[1:-1], start=1):
            child = supervisor._find(name)
            nested = child.incarnation.supervisor if child.incarnation else None
            if child.spec.kind != "supervisor":
                raise LookupError(f"{'/'.join(parts[: depth + 1])} is a worker: it has no children")
            if nested is None or not child.running:
                raise NotRunning(f"{'/'.join(parts[: depth + 1])} is not running (restarting?)")
            supervisor = nested
        supervisor._find(parts[-1])
        return supervisor, parts[-1]

    def find_supervisor(self, path: str) -> Supervisor:
        """The running supervisor at `path` (this one, or one nested below it)."""
        if path.strip("/") == self.path:
            return self
        owner, name = self.locate(path)
        child = owner._find(name)
        nested = child.incarnation.supervisor if child.incarnation else None
        if nested is None or not child.running:
            raise NotRunning(f"{path} is not a running supervisor")
        return nested

    def has_child(self, name: str) -> bool:
        return name in self._children

    def snapshot(self) -> ActorSnapshot:
        return self.record.snapshot(children=[self._snapshot_child(c) for c in self._children.values()])

    def _snapshot_child(self, child: Child) -> ActorSnapshot:
        nested = child.incarnation.supervisor if child.incarnation else None
        if nested is not None and child.running:
            return nested.snapshot()
        return child.record.snapshot(children=[])


__all__ = ["Supervisor"]
