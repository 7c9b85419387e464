"""Crash-loop and image-pull back-off: Go's flowcontrol.Backoff on a fake clock."""

from __future__ import annotations

import pytest

from pykubelet.messages.pod import Container, ObjectMeta, Pod, PodSpec
from pykubelet.pods.backoff import (
    CrashLoopBackOff,
    backoff_key,
    crash_loop_message,
    go_duration,
    image_backoff_key,
    image_pull_backoff_message,
)
from pykubelet.pods.labels import container_hash


class Clock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


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
