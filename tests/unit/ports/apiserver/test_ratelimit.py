"""TokenBucket: client-go's QPS/burst limit, on trio's (mock) clock."""

from __future__ import annotations

import pytest
import trio

from pykubelet.ports.apiserver import TokenBucket


async def test_a_full_bucket_lets_the_burst_through_then_one_every_1_over_qps(autojump_clock) -> None:
    bucket = TokenBucket(qps=50, burst=100)
    start = trio.current_time()
    for _ in range(100):
        assert await bucket.acquire() == 0.0
    assert trio.current_time() == start
    waited = await bucket.acquire()
    assert waited == pytest.approx(0.02)
    for _ in range(49):
        await bucket.acquire()
    assert trio.current_time() - start == pytest.approx(1.0)


async def test_tokens_refill_at_qps_up_to_burst(autojump_clock) -> None:
    bucket = TokenBucket(qps=10, burst=5)
    for _ in range(5):
        assert bucket.try_acquire()
    assert not bucket.try_acquire()
    await trio.sleep(0.35)
    assert bucket.tokens() == pytest.approx(3.5)
    await trio.sleep(100)
    assert bucket.tokens() == 5


async def test_waiters_are_served_in_order_at_the_rate(autojump_clock) -> None:
    bucket = TokenBucket(qps=2, burst=1)
    served: list[tuple[int, float]] = []
    start = trio.current_time()

    async def request(i: int) -> None:
        await bucket.acquire()
        served.append((i, trio.current_time() - start))

    async with trio.open_nursery() as nursery:
        for i in range(4):
            nursery.start_soon(request, i)
            await trio.sleep(0)
    assert served == [(0, 0.0), (1, 0.5), (2, 1.0), (3, 1.5)]


async def test_a_cancelled_waiter_gives_its_token_back(autojump_clock) -> None:
    bucket = TokenBucket(qps=1, burst=1)
    await bucket.acquire()
    with trio.move_on_after(0.1):
        await bucket.acquire()  # would wait 1 s
    await trio.sleep(0.9)  # 1 s after the first token
    assert bucket.try_acquire()


def test_bad_limits_are_refused() -> None:
    with pytest.raises(ValueError, match="qps must be > 0"):
        TokenBucket(qps=0, burst=1)
    with pytest.raises(ValueError, match="burst must be >= 1"):
        TokenBucket(qps=1, burst=0)
