"""actors/probes/wakeups.py on MockClock: callers for one instant share a timer and all
wake at it; cancelling the timer's holder or a parked caller leaves the others on time."""

from __future__ import annotations

import trio

from pykubelet.actors.probes import wakeups


async def _sleeper(when: float, woke: dict[str, float], name: str) -> None:
    await wakeups.sleep_until(when)
    woke[name] = trio.current_time()


async def test_callers_for_the_same_instant_all_wake_at_it_and_others_at_theirs(autojump_clock):
    woke: dict[str, float] = {}
    with trio.fail_after(10):  # a lost wake-up fails, not hangs
        async with trio.open_nursery() as nursery:
            for name in ("a", "b", "c"):
                nursery.start_soon(_sleeper, 1.5, woke, name)
            nursery.start_soon(_sleeper, 2.0, woke, "d")
            nursery.start_soon(_sleeper, 0.5, woke, "e")
    assert woke == {"a": 1.5, "b": 1.5, "c": 1.5, "d": 2.0, "e": 0.5}


async def test_an_instant_already_past_returns_at_once(autojump_clock):
    await trio.sleep(3)
    await wakeups.sleep_until(1.0)
    assert trio.current_time() == 3.0


async def test_the_timers_holder_cancelled_hands_it_on_and_the_others_wake_on_time(autojump_clock):
    woke: dict[str, float] = {}
    cancelled: list[float] = []
    scopes: list[trio.CancelScope] = []

    async def holder() -> None:
        with trio.CancelScope() as own:
            scopes.append(own)
            await wakeups.sleep_until(3.0)
        cancelled.append(trio.current_time())

    with trio.fail_after(10):  # a lost wake-up fails, not hangs
        async with trio.open_nursery() as nursery:
            nursery.start_soon(holder)
            await trio.sleep(0.1)  # the holder sleeps first: it holds the timer for 3.0
            nursery.start_soon(_sleeper, 3.0, woke, "b")
            nursery.start_soon(_sleeper, 3.0, woke, "c")
            await trio.sleep(0.5)
            scopes[0].cancel()
            await trio.sleep(0.1)
            nursery.start_soon(_sleeper, 3.0, woke, "late")  # parks behind the new holder
    assert cancelled == [0.6]
    assert woke == {"b": 3.0, "c": 3.0, "late": 3.0}


async def test_a_parked_caller_cancelled_wakes_at_once_and_leaves_the_others_on_time(autojump_clock):
    woke: dict[str, float] = {}
    cancelled: list[float] = []

    async def parked_in_scope() -> None:
        with trio.CancelScope() as own:
            scopes.append(own)
            await wakeups.sleep_until(4.0)
        cancelled.append(trio.current_time())

    scopes: list[trio.CancelScope] = []
    with trio.fail_after(10):  # a lost wake-up fails, not hangs
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_sleeper, 4.0, woke, "holder")
            await trio.sleep(0.1)
            nursery.start_soon(parked_in_scope)
            nursery.start_soon(_sleeper, 4.0, woke, "other")
            await trio.sleep(1)
            scopes[0].cancel()
    assert cancelled == [1.1]
    assert woke == {"holder": 4.0, "other": 4.0}
