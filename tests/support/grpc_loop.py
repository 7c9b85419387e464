"""An asyncio loop in a thread of its own, on which the tests' grpc.aio servers (the fake
runtimes) and clients run, driven from trio: run(fn, *args) starts a coroutine there with
one hop and wakes the trio task once with its outcome; cancelling the trio task cancels the
coroutine. The daemon used it for its CRI calls and gRPC probes until ports/grpc_client;
grpc.aio binds its completion-queue poller to one loop per process, so there is exactly
one, started on first use and never closed.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import outcome
import trio

T = TypeVar("T")

__all__ = ["CancelledOnLoop", "call_soon", "run"]


class CancelledOnLoop(Exception):
    """The coroutine was cancelled on the asyncio side, not by its trio caller: grpc.aio
    cancels the calls in flight when their channel closes. An ordinary exception, so that
    asyncio's CancelledError (a BaseException trio code never expects) stops here."""


_lock = threading.Lock()
_loop: asyncio.AbstractEventLoop | None = None


def _running_loop() -> asyncio.AbstractEventLoop:
    global _loop
    loop = _loop
    if loop is not None:
        return loop
    with _lock:
        if _loop is None:
            # A plain selector loop: trio-asyncio's policy (when imported) refuses
            # asyncio.new_event_loop() inside trio.
            loop = asyncio.SelectorEventLoop()
            threading.Thread(target=_serve, args=(loop,), name="grpc-aio-loop", daemon=True).start()
            _loop = loop
        return _loop


def _serve(loop: asyncio.AbstractEventLoop) -> None:
    asyncio.set_event_loop(loop)
    loop.run_forever()


def call_soon(fn: Callable[..., Any], *args: Any) -> None:
    """Run fn(*args) on the loop, without waiting for it (e.g. cancel a grpc.aio call)."""
    _running_loop().call_soon_threadsafe(fn, *args)


async def run(
    async_fn: Callable[..., Awaitable[T]], *args: Any, discard: Callable[[T], Any] | None = None
) -> T:
    """Await async_fn(*args) (a coroutine or any awaitable, made on the loop) on the loop and
    return its result (or raise its exception) to the calling trio task, with one wake-up.
    An exception raised while making the awaitable is raised the same way. Cancelling the
    trio task cancels the coroutine there (for a grpc.aio call: the RPC, at once); the task
    sees trio.Cancelled right away.
    A cancellation that did not come from the caller raises CancelledOnLoop.

    `discard(result)` runs on the loop when a result came back after the trio task was
    cancelled (nobody takes it then): for a result that holds something open, such as a
    streaming call to cancel."""
    handoff = _Handoff(trio.lowlevel.current_task(), trio.lowlevel.current_trio_token(), discard)
    _running_loop().call_soon_threadsafe(handoff.start, async_fn, args)
    return await trio.lowlevel.wait_task_rescheduled(handoff.abort)  # the outcome, unwrapped


class _Handoff:
    """One call's way there and back. `waiting` lives on the trio side; `aio_task` and
    `cancelled` on the loop's."""

    __slots__ = ("task", "token", "discard", "waiting", "aio_task", "cancelled")

    def __init__(
        self, task: trio.lowlevel.Task, token: trio.lowlevel.TrioToken, discard: Callable[[Any], Any] | None
    ) -> None:
        self.task = task
        self.token = token
        self.discard = discard
        self.waiting = True
        self.aio_task: asyncio.Task | None = None
        self.cancelled = False

    # -- on the loop --

    def start(self, async_fn: Callable[..., Awaitable[Any]], args: tuple) -> None:
        if self.cancelled:  # the trio task gave up before the loop got here
            return
        try:
            self.aio_task = asyncio.ensure_future(async_fn(*args))  # a coroutine, or a grpc.aio call
        except Exception as error:  # e.g. a stub refusing its request: the trio task must still wake
            self.send(outcome.Error(error))
            return
        self.aio_task.add_done_callback(self.done)

    def done(self, aio_task: asyncio.Task) -> None:
        if aio_task.cancelled():
            if self.cancelled:
                return  # the trio task already went on with trio.Cancelled
            result: outcome.Outcome = outcome.Error(CancelledOnLoop("cancelled on the asyncio side"))
        elif (error := aio_task.exception()) is not None:
            result = outcome.Error(error)
        else:
            result = outcome.Value(aio_task.result())
        self.send(result)

    def send(self, result: outcome.Outcome) -> None:
        try:
            self.token.run_sync_soon(self.deliver, result)
        except trio.RunFinishedError:
            pass  # the trio run that asked is gone; nobody waits for this

    def cancel(self) -> None:
        self.cancelled = True
        if self.aio_task is not None:
            self.aio_task.cancel()

    # -- in trio --

    def deliver(self, result: outcome.Outcome) -> None:
        if self.waiting:
            self.waiting = False
            trio.lowlevel.reschedule(self.task, result)
        elif self.discard is not None and isinstance(result, outcome.Value):
            call_soon(self.discard, result.value)  # the task was cancelled: nobody takes it

    def abort(self, _raise_cancel: Any) -> trio.lowlevel.Abort:
        self.waiting = False
        call_soon(self.cancel)
        return trio.lowlevel.Abort.SUCCEEDED
