"""Shared wake-ups of the probe workers: the workers due at the same instant (the 50 ms
grid of PROBE_TIMER_SLACK) sleep on one trio timer, not one each.

The first worker to sleep until an instant holds the timer for it; the others park
without a deadline of their own and the holder wakes them all when it fires. A timer
is a cancel scope with a deadline, and its expiry is the dearest part of a worker's
sleep (the scope's cancellation, delivered as an exception that unwinds the sleep), so
the timers a second drop from one per probe to one per instant that has probes due.
"""

from __future__ import annotations

import outcome
import trio

# instant (trio time) -> the tasks parked until it; its holder sleeps on a timer.
_parked: trio.lowlevel.RunVar[dict[float, list[trio.lowlevel.Task]]] = trio.lowlevel.RunVar("probe_wakeups")
_HOLD = object()  # the value a parked task is woken with when it must hold the timer


async def sleep_until(when: float) -> None:
    """trio.sleep_until(when), sharing one timer with every other caller for `when`:
    cancellable, and every caller wakes at `when` exactly as it would on its own."""
    try:
        parked = _parked.get()
    except LookupError:
        parked = {}
        _parked.set(parked)
    waiting = parked.get(when)
    if waiting is None:
        parked[when] = []
        await _hold(parked, when)
        return
    task = trio.lowlevel.current_task()
    waiting.append(task)

    def abort(_: object) -> trio.lowlevel.Abort:
        waiting.remove(task)
        return trio.lowlevel.Abort.SUCCEEDED

    if await trio.lowlevel.wait_task_rescheduled(abort) is _HOLD:
        await _hold(parked, when)


async def _hold(parked: dict[float, list[trio.lowlevel.Task]], when: float) -> None:
    """Sleep on the timer for `when`, then wake every task parked until it. A holder that
    is cancelled first hands the timer to one of them."""
    try:
        await trio.sleep_until(when)
    except BaseException:
        waiting = parked.get(when)
        if waiting:
            trio.lowlevel.reschedule(waiting.pop(0), outcome.Value(_HOLD))
        else:
            parked.pop(when, None)
        raise
    for task in parked.pop(when):
        trio.lowlevel.reschedule(task)

