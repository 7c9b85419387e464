"""The token bucket (golang.org/x/time/rate, as client-go's flowcontrol uses it): the
client-side rate limit of API requests (QPS and burst), and the event recorder's spam
filter per event source.

A full bucket lets `burst` requests through at once, then one every 1/qps seconds. Waiters
reserve their token (the bucket may go negative), so they are served in arrival order, as
golang.org/x/time/rate does. Time is trio's clock, so tests drive it with MockClock.
"""

from __future__ import annotations

import trio


class TokenBucket:
    """`await bucket.acquire()` before each request; returns the seconds it waited."""

    def __init__(self, qps: float, burst: int) -> None:
        if qps <= 0:
            raise ValueError(f"rate limit: qps must be > 0, got {qps!r} (pass qps=None for no limit)")
        if burst < 1:
            raise ValueError(f"rate limit: burst must be >= 1, got {burst!r}")
        self.qps = float(qps)
        self.burst = int(burst)
        self._tokens = float(burst)
        self._last: float | None = None  # trio time of the last refill; set on first use

    def _refill(self, now: float) -> None:
        if self._last is not None:
            self._tokens = min(self.burst, self._tokens + max(0.0, now - self._last) * self.qps)  # a clock stepped back refills nothing
        self._last = now

    def tokens(self) -> float:
        """Tokens available now (negative while waiters hold reservations)."""
        self._refill(trio.current_time())
        return self._tokens

    def try_acquire(self, now: float | None = None) -> bool:
        """Take a token if one is available now, without waiting. `now`: a clock of the
        caller's own (the event recorder's spam filter); trio's by default."""
        self._refill(trio.current_time() if now is None else now)
        if self._tokens >= 1:
            self._tokens -= 1
            return True
        return False

    async def acquire(self) -> float:
        """Wait for a token. A cancelled waiter gives its reservation back."""
        self._refill(trio.current_time())
        self._tokens -= 1
        if self._tokens >= 0:
            await trio.lowlevel.checkpoint()
            return 0.0
        wait = -self._tokens / self.qps
        try:
            await trio.sleep(wait)
        except BaseException:
            self._tokens += 1
            raise
        return wait
