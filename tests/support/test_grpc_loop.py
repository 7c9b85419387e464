"""The tests' grpc loop (tests/support/grpc_loop.py): results, errors and cancellation cross between trio and
the asyncio loop thread, and asyncio's CancelledError never reaches trio code.

The loop is a real thread: these tests wait for conditions on it (threading.Event through
trio.to_thread), never for a fixed time."""

from __future__ import annotations

import asyncio
import threading

import pytest
import trio

from tests.support import grpc_loop


async def wait_on_thread(event: threading.Event, within: float = 30.0) -> bool:
    return await trio.to_thread.run_sync(event.wait, within)


async def test_the_result_comes_back_from_the_loop_thread() -> None:
    async def where() -> str:
        await asyncio.sleep(0)
        return threading.current_thread().name

    assert await grpc_loop.run(where) == "grpc-aio-loop"


async def test_an_exception_on_the_loop_is_raised_in_the_trio_task() -> None:
    async def fail(message: str) -> None:
        raise ValueError(message)

    with pytest.raises(ValueError, match="named input"):
        await grpc_loop.run(fail, "named input")


async def test_cancelling_the_trio_task_cancels_the_coroutine_on_the_loop() -> None:
    started, cancelled = threading.Event(), threading.Event()

    async def hang() -> None:
        started.set()
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    async with trio.open_nursery() as nursery:
        nursery.start_soon(grpc_loop.run, hang)
        assert await wait_on_thread(started)
        nursery.cancel_scope.cancel()  # the task sees trio.Cancelled, the nursery absorbs it
    assert await wait_on_thread(cancelled)


async def test_a_cancellation_on_the_loop_side_is_an_ordinary_exception_in_trio() -> None:
    # What grpc.aio does to calls in flight when their channel closes: it cancels them.
    async def cancelled_from_within() -> None:
        asyncio.current_task().cancel()
        await asyncio.sleep(3600)

    with pytest.raises(grpc_loop.CancelledOnLoop):
        await grpc_loop.run(cancelled_from_within)
    assert not issubclass(grpc_loop.CancelledOnLoop, asyncio.CancelledError)


async def test_calls_from_many_trio_tasks_each_get_their_own_answer() -> None:
    async def double(value: int) -> int:
        await asyncio.sleep(0)
        return 2 * value

    answers: dict[int, int] = {}

    async def ask(value: int) -> None:
        answers[value] = await grpc_loop.run(double, value)

    async with trio.open_nursery() as nursery:
        for value in range(50):
            nursery.start_soon(ask, value)
    assert answers == {value: 2 * value for value in range(50)}


async def test_an_exception_while_making_the_awaitable_is_raised_in_the_trio_task() -> None:
    # e.g. a grpc.aio stub refusing a request of the wrong type before any call exists
    def refuse(request: object) -> None:
        raise TypeError(f"not a request: {request!r}")

    with trio.fail_after(30):
        with pytest.raises(TypeError, match="not a request"):
            await grpc_loop.run(refuse, 42)

    with trio.fail_after(30):
        with pytest.raises(TypeError):
            await grpc_loop.run(lambda: 42)  # not awaitable


async def test_a_result_that_comes_back_after_the_trio_task_was_cancelled_is_discarded() -> None:
    # The race of a stream opened while its trio task is cancelled: the loop finishes the
    # call, but the trio task's cancellation runs before the result reaches it.
    token = trio.lowlevel.current_trio_token()
    discarded = threading.Event()
    got: list[object] = []

    with trio.CancelScope() as scope:

        async def open_then_lose_the_caller() -> str:
            token.run_sync_soon(scope.cancel)  # runs in trio before the result's delivery
            return "an open stream"

        def discard(value: str) -> None:
            got.append((value, threading.current_thread().name))
            discarded.set()

        await grpc_loop.run(open_then_lose_the_caller, discard=discard)
    assert scope.cancelled_caught
    assert await wait_on_thread(discarded)
    assert got == [("an open stream", "grpc-aio-loop")]
