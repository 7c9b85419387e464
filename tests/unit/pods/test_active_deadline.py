"""activeDeadlineSeconds: Go's activeDeadlineHandler, one row per behaviour."""

from __future__ import annotations

import pytest

from pykubelet.messages.pod import ObjectMeta, Pod, PodSpec, PodStatus
from pykubelet.pods.active_deadline import (
    DEADLINE_EXCEEDED,
    DEADLINE_EXCEEDED_MESSAGE,
    active_deadline_remaining,
    past_active_deadline,
    start_time_of,
)

T0 = 1_795_000_000.0  # 2026-11-18T11:06:40Z
T0_TEXT = "2026-11-18T11:06:40Z"


def make_pod(deadline: int | None = None, start_time: str | None = None) -> Pod:
    return Pod(
        metadata=ObjectMeta(name="p", namespace="ns", uid="u1"),
        spec=PodSpec(active_deadline_seconds=deadline),
        status=PodStatus(start_time=start_time),
    )


DEADLINE_ROWS = [
    ("no activeDeadlineSeconds: never past, nothing to wait for", make_pod(), T0 + 10_000, T0, False, None),
    ("not started yet: not past, nothing to wait for", make_pod(30), T0 + 10_000, None, False, None),
    ("active for less than the deadline: not past, the rest to wait", make_pod(30), T0 + 10, T0, False, 20.0),
    ("active for exactly the deadline: past (Go compares >=)", make_pod(30), T0 + 30, T0, True, 0.0),
    ("active for longer than the deadline: past, nothing left", make_pod(30), T0 + 90, T0, True, 0.0),
    ("a fraction of a second before: not past", make_pod(30), T0 + 29.5, T0, False, 0.5),
    ("clock behind the start time: the whole deadline and more", make_pod(30), T0 - 5, T0, False, 35.0),
]


@pytest.mark.parametrize(
    "behaviour, pod, now, start_time, past, remaining", DEADLINE_ROWS, ids=[r[0] for r in DEADLINE_ROWS]
)
def test_active_deadline(behaviour, pod, now, start_time, past, remaining):
    assert past_active_deadline(pod, now, start_time) is past
    assert active_deadline_remaining(pod, now, start_time) == remaining


START_ROWS = [
    ("the status last computed comes first", make_pod(30, "2026-01-01T00:00:00Z"), PodStatus(start_time=T0_TEXT), T0),
    ("no status computed yet: the API's", make_pod(30, T0_TEXT), None, T0),
    ("fractional seconds from the API are kept", make_pod(30, "2026-11-18T11:06:40.25Z"), None, T0 + 0.25),
    ("a status computed without a start time: not started (Go does not fall back)",
     make_pod(30, T0_TEXT), PodStatus(), None),
    ("never started anywhere", make_pod(30), None, None),
]


@pytest.mark.parametrize("behaviour, pod, previous, expected", START_ROWS, ids=[r[0] for r in START_ROWS])
def test_start_time_of(behaviour, pod, previous, expected):
    assert start_time_of(pod, previous) == expected


def test_reason_and_message_are_gos():
    assert DEADLINE_EXCEEDED == "DeadlineExceeded"
    assert DEADLINE_EXCEEDED_MESSAGE == "Pod was active on the node longer than the specified deadline"
