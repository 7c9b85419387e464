"""The one back-off (ExponentialBackoff, Go's wait.Backoff) and the per-key crash-loop and
image-pull back-off built on it (Go's flowcontrol.Backoff on a fake clock)."""

from __future__ import annotations

import pytest

from pykubelet.messages.pod import Container, ObjectMeta, Pod, PodSpec
from pykubelet.pods.backoff import (
    CrashLoopBackOff,
    ExponentialBackoff,
    backoff_key,
    crash_loop_message,
    go_duration,
    image_backoff_key,
    image_pull_backoff_message,
    watch_backoff,
)
from pykubelet.pods.labels import container_hash


class Clock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def steps(backoff: ExponentialBackoff, n: int) -> list[float]:
    return [round(backoff.next_delay(), 6) for _ in range(n)]


@pytest.mark.parametrize(
    "behaviour, backoff, expected",
    [
        ("doubles from initial to the maximum, then stays",
         ExponentialBackoff(0.5, 10.0), [0.5, 1, 2, 4, 8, 10, 10]),
        ("the cap is reached exactly when it is no power of two away",
         ExponentialBackoff(0.2, 7.0), [0.2, 0.4, 0.8, 1.6, 3.2, 6.4, 7.0]),
        ("initial equal to maximum: a constant delay",
         ExponentialBackoff(3.0, 3.0), [3, 3, 3]),
        ("another factor (the authorization webhook's 1.5)",
         ExponentialBackoff(0.5, 2.0, factor=1.5), [0.5, 0.75, 1.125, 1.6875, 2.0]),
        ("factor 1: no growth",
         ExponentialBackoff(1.0, 5.0, factor=1.0), [1, 1, 1]),
        ("jitter stretches each delay by jitter x random",
         ExponentialBackoff(1.0, 4.0, jitter=0.5, random=lambda: 0.5), [1.25, 2.5, 5.0, 5.0]),
        ("jitter with a zero draw is no jitter",
         ExponentialBackoff(1.0, 4.0, jitter=1.0, random=lambda: 0.0), [1, 2, 4, 4]),
    ],
)
def test_exponential_backoff_delays(behaviour, backoff, expected):
    assert steps(backoff, len(expected)) == expected


def test_jitter_is_drawn_for_each_delay_and_never_shortens_it():
    draws = iter([0.0, 0.999, 0.25])
    backoff = ExponentialBackoff(2.0, 8.0, jitter=1.0, random=lambda: next(draws))
    assert steps(backoff, 3) == [2.0, pytest.approx(7.996), 10.0]


def test_reset_starts_over_at_initial():
    backoff = ExponentialBackoff(0.5, 30.0, jitter=0.5, random=lambda: 0.5)
    assert steps(backoff, 3) == [0.625, 1.25, 2.5]
    backoff.reset()
    assert steps(backoff, 2) == [0.625, 1.25]


@pytest.mark.parametrize(
    "initial, maximum, factor, jitter",
    [(0, 1, 2, 0), (-1, 1, 2, 0), (2, 1, 2, 0), (1, 2, 0.5, 0), (1, 2, 2, -0.1), (1, 2, 2, float("inf"))],
)
def test_bad_backoff_settings_are_refused_by_name(initial, maximum, factor, jitter):
    with pytest.raises(ValueError, match="needs 0 < initial <= maximum"):
        ExponentialBackoff(initial, maximum, factor=factor, jitter=jitter)


def test_watch_backoff_is_half_a_second_doubling_to_30s_with_half_jitter():
    assert steps(watch_backoff(random=lambda: 0.0), 8) == [0.5, 1, 2, 4, 8, 16, 30, 30]
    assert watch_backoff(random=lambda: 1.0).next_delay() == 0.75


def test_crash_loop_backoff_10s_doubling_to_300s_and_reset_after_600s():
    clock = Clock()
    backoff = CrashLoopBackOff(clock)
    delays = []
    for _ in range(8):
        backoff.next("c", clock.now)
        delays.append(backoff.delay("c"))
        clock.now += backoff.delay("c")  # crash again as soon as allowed
    assert delays == [10, 20, 40, 80, 160, 300, 300, 300]

    # Ran for more than 2 x 300 s since the last restart: start over at 10 s.
    finished = clock.now + 601
    clock.now = finished
    backoff.next("c", finished)
    assert backoff.delay("c") == 10


@pytest.mark.parametrize(
    "behaviour, steps, since_offset, expected",
    [
        ("unknown key is never in back-off", 0, 0, False),
        ("just crashed after the first restart: wait", 1, 0, True),
        ("9.9 s after the crash with a 10 s delay: still waiting", 1, -9.9, True),
        ("10 s after the crash: go", 1, -10, False),
        ("second delay is 20 s: 15 s after the crash still waiting", 2, -15, True),
    ],
)
def test_in_backoff_since_the_last_finish(behaviour, steps, since_offset, expected):
    clock = Clock()
    backoff = CrashLoopBackOff(clock)
    for _ in range(steps):
        backoff.next("c", clock.now)
    assert backoff.in_backoff("c", clock.now + since_offset) is expected


def test_an_event_more_than_600s_after_the_last_update_is_not_in_backoff():
    clock = Clock()
    backoff = CrashLoopBackOff(clock)
    for _ in range(6):
        backoff.next("c", clock.now)
    clock.now += 700
    assert not backoff.in_backoff("c", clock.now - 1)  # finished 699 s after the last restart


def test_remaining_counts_down_to_zero():
    clock = Clock()
    backoff = CrashLoopBackOff(clock)
    backoff.next("c", clock.now)
    backoff.next("c", clock.now)  # 20 s
    finished = clock.now
    clock.now += 5
    assert backoff.remaining("c", finished) == 15
    clock.now += 15
    assert backoff.remaining("c", finished) == 0
    assert backoff.remaining("other", finished) == 0


def test_image_pull_backoff_counts_from_the_last_failed_pull():
    clock = Clock()
    pulls = CrashLoopBackOff(clock)
    assert not pulls.in_backoff_since_update("k", clock.now)
    pulls.next("k", clock.now)
    clock.now += 9
    assert pulls.in_backoff_since_update("k", clock.now)
    clock.now += 1
    assert not pulls.in_backoff_since_update("k", clock.now)


def test_gc_drops_only_entries_idle_for_600s():
    clock = Clock()
    backoff = CrashLoopBackOff(clock)
    backoff.next("old", clock.now)
    clock.now += 500
    backoff.next("new", clock.now)
    clock.now += 101  # old: 601 s idle, new: 101 s
    backoff.gc()
    assert backoff.delay("old") == 0 and backoff.delay("new") == 10 and len(backoff) == 1


def test_reset_forgets_a_key():
    backoff = CrashLoopBackOff(Clock())
    backoff.next("c", 1000)
    backoff.reset("c")
    assert backoff.delay("c") == 0


POD = Pod(metadata=ObjectMeta(name="web", namespace="default", uid="u1"), spec=PodSpec())
NGINX = Container(name="nginx", image="nginx:1.25")


def test_backoff_key_is_gos_stable_key():
    assert backoff_key(POD, NGINX) == f"web_default_u1_nginx_{container_hash(NGINX)}"
    assert backoff_key(POD, NGINX) != backoff_key(POD, Container(name="nginx", image="nginx:1.26"))


def test_image_backoff_key_is_uid_and_image():
    assert image_backoff_key(POD, "nginx:1.25") == "u1_nginx:1.25"


@pytest.mark.parametrize(
    "seconds, text",
    [(10, "10s"), (20, "20s"), (80, "1m20s"), (160, "2m40s"), (300, "5m0s"), (3725, "1h2m5s"),
     (1.5, "1.5s"), (0.25, "250ms"), (0, "0s")],
)
def test_go_duration(seconds, text):
    assert go_duration(seconds) == text


def test_messages_word_it_as_go():
    assert crash_loop_message(20, POD, "nginx") == "back-off 20s restarting failed container=nginx pod=web_default(u1)"
    assert image_pull_backoff_message("127.0.0.1:5999/missing:1") == 'Back-off pulling image "127.0.0.1:5999/missing:1"'
