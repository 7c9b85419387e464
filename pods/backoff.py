"""The one back-off of the kubelet: `ExponentialBackoff`, the delays of one retry loop
(Go's wait.Backoff), which every actor that retries sleeps by; and `CrashLoopBackOff`, a
map of them per key with Go's flowcontrol.Backoff rules (CrashLoopBackOff, ImagePullBackOff).

Pure bookkeeping: the actors sleep, this only says how long. CrashLoopBackOff runs on an
injected clock that must share a time base with the times passed in: container finish
times from the runtime are Unix seconds, so it needs a wall clock (time.time) there.
"""

from __future__ import annotations

import math
import random as _random
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from pykubelet.messages.pod import Container, Pod

from .labels import container_hash

INITIAL_DELAY = 10.0  # Go: backOffPeriod
MAX_DELAY = 300.0  # Go: MaxContainerBackOff (and the image pull back-off's maximum)

# A list+watch loop (the api source, the ConfigMap/Secret/Service watches): client-go's
# reflector backs off 0.8 s doubling to 30 s with jitter 1.0; here from 0.5 s, jitter 0.5.
WATCH_BACKOFF_INITIAL = 0.5
WATCH_BACKOFF_MAX = 30.0
WATCH_BACKOFF_JITTER = 0.5


def jittered(seconds: float, max_factor: float, random: Callable[[], float] | None = None) -> float:
    """`seconds` stretched by up to `max_factor` of itself (Go's wait.Jitter: d + r*factor*d,
    r from `random` in [0, 1), the random module's by default)."""
    return seconds * (1 + max_factor * (random or _random.random)())


@dataclass
class ExponentialBackoff:
    """The delays of one retry loop: `initial`, times `factor` after each one up to
    `maximum`, each stretched by up to `jitter` of itself (Go's wait.Jitter: d + r*jitter*d,
    r from `random` in [0, 1); the cap bounds the base, so a jittered delay may pass it, as
    Go's). `reset()` after a success starts over at `initial`."""

    initial: float
    maximum: float
    factor: float = 2.0
    jitter: float = 0.0
    random: Callable[[], float] = field(default=_random.random, repr=False, compare=False)
    _base: float = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not 0 < self.initial <= self.maximum or self.factor < 1 or not 0 <= self.jitter < math.inf:
            raise ValueError(
                f"back-off initial={self.initial:g} maximum={self.maximum:g} factor={self.factor:g} "
                f"jitter={self.jitter:g}: needs 0 < initial <= maximum, factor >= 1, jitter >= 0"
            )
        self._base = self.initial

    def next_delay(self) -> float:
        """The delay to wait now; the one after it grows by `factor` (Go: Backoff.Step)."""
        delay, self._base = self._base, min(self._base * self.factor, self.maximum)
        return jittered(delay, self.jitter, self.random) if self.jitter else delay

    def reset(self) -> None:
        """Start over at `initial` (the retried call worked)."""
        self._base = self.initial


def watch_backoff(
    initial: float = WATCH_BACKOFF_INITIAL,
    maximum: float = WATCH_BACKOFF_MAX,
    random: Callable[[], float] = _random.random,
) -> ExponentialBackoff:
    """The back-off of a list+watch loop after an error (jittered, as client-go's reflector,
    so that the node's watches do not all come back in the same instant)."""
    return ExponentialBackoff(initial, maximum, jitter=WATCH_BACKOFF_JITTER, random=random)


@dataclass
class _Entry:
    steps: ExponentialBackoff
    delay: float
    last_update: float


class CrashLoopBackOff:
    """An ExponentialBackoff per key (no jitter, as Go's kubelet): `initial` doubling on
    each `next` up to `maximum`, starting over once an entry has gone 2 x maximum (600 s)
    without an update — the "reset after ten minutes of running" of a crash-looping
    container."""

    def __init__(
        self,
        clock: Callable[[], float] = time.time,
        *,
        initial: float = INITIAL_DELAY,
        maximum: float = MAX_DELAY,
    ) -> None:
        self._clock = clock
        self.initial = initial
        self.maximum = maximum
        self._entries: dict[str, _Entry] = {}

    def _expired(self, at: float, entry: _Entry) -> bool:
        return at - entry.last_update > 2 * self.maximum

    def delay(self, key: str) -> float:
        """The current delay for key; 0 when it has none (Go: Get)."""
        entry = self._entries.get(key)
        return entry.delay if entry else 0.0

    def next(self, key: str, at: float) -> None:
        """Record a new attempt at time `at`: first delay, or double the last (Go: Next)."""
        entry = self._entries.get(key)
        if entry is None or self._expired(at, entry):
            entry = self._entries[key] = _Entry(ExponentialBackoff(self.initial, self.maximum), 0.0, 0.0)
        entry.delay = entry.steps.next_delay()
        entry.last_update = self._clock()

    def in_backoff(self, key: str, since: float) -> bool:
        """True while less than the current delay has passed since `since` (Go:
        IsInBackOffSince; the crash loop passes the last container's finish time)."""
        entry = self._entries.get(key)
        if entry is None or self._expired(since, entry):
            return False
        return self._clock() - since < entry.delay

    def in_backoff_since_update(self, key: str, at: float) -> bool:
        """True while `at` is within the current delay of the last `next` (Go:
        IsInBackOffSinceUpdate; the image puller passes the clock's now)."""
        entry = self._entries.get(key)
        if entry is None or self._expired(at, entry):
            return False
        return at - entry.last_update < entry.delay

    def remaining(self, key: str, since: float) -> float:
        """Seconds until `in_backoff(key, since)` turns false; 0 when not in back-off."""
        if not self.in_backoff(key, since):
            return 0.0
        return self._entries[key].delay - (self._clock() - since)

    def reset(self, key: str) -> None:
        """Forget key (Go: Reset / DeleteEntry)."""
        self._entries.pop(key, None)

    def gc(self) -> None:
        """Drop entries not updated for 2 x maximum; call it now and then (Go: GC)."""
        now = self._clock()
        for key in [k for k, e in self._entries.items() if self._expired(now, e)]:
            del self._entries[key]

    def __len__(self) -> int:
        return len(self._entries)


def backoff_key(pod: Pod, container: Container) -> str:
    """Go's GetStableKey: name_namespace_uid_container_hash, so that a changed container
    spec (a new image) starts with a fresh back-off."""
    meta = pod.metadata
    return f"{meta.name}_{meta.namespace}_{meta.uid}_{container.name}_{container_hash(container)}"


def image_backoff_key(pod: Pod, image: str) -> str:
    """The image manager's back-off key: <pod uid>_<image>."""
    return f"{pod.metadata.uid}_{image}"


def format_pod(pod: Pod) -> str:
    """name_namespace(uid): how the Go kubelet names a pod in messages (format.Pod)."""
    meta = pod.metadata
    return f"{meta.name}_{meta.namespace}({meta.uid})"


def crash_loop_message(delay: float, pod: Pod, container_name: str) -> str:
    """The CrashLoopBackOff waiting message, as the Go kubelet words it."""
    return f"back-off {go_duration(delay)} restarting failed container={container_name} pod={format_pod(pod)}"


def image_pull_backoff_message(image: str) -> str:
    """The ImagePullBackOff waiting message, as the Go kubelet words it."""
    return f'Back-off pulling image "{image}"'


def go_duration(seconds: float) -> str:
    """A duration as Go's time.Duration.String() prints it: 10s, 1m20s, 5m0s, 1.5s, 250ms."""
    nanos = round(seconds * 1e9)
    if nanos == 0:
        return "0s"
    sign = "-" if nanos < 0 else ""
    nanos = abs(nanos)
    if nanos < 1_000_000_000:
        for unit, size in (("ms", 1_000_000), ("µs", 1_000), ("ns", 1)):
            if nanos >= size:
                return sign + _trim(nanos, size) + unit
    hours, rest = divmod(nanos, 3600 * 10**9)
    minutes, rest = divmod(rest, 60 * 10**9)
    text = _trim(rest, 10**9) + "s"
    if hours:
        return f"{sign}{hours}h{minutes}m{text}"
    if minutes:
        return f"{sign}{minutes}m{text}"
    return sign + text


def _trim(value: int, unit: int) -> str:
    whole, frac = divmod(value, unit)
    if not frac:
        return str(whole)
    digits = len(str(unit)) - 1
    return f"{whole}.{frac:0{digits}d}".rstrip("0")
