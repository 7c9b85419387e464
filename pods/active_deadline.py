"""activeDeadlineSeconds, pure: has a pod been active on the node longer than its spec allows,
and when will it have been (Go's activeDeadlineHandler, pkg/kubelet/active_deadline.go).
The pod worker asks on each sync and hands the answer to compute_pod_actions (kill the pod)
and compute_pod_status (phase Failed, reason DeadlineExceeded).
"""

from __future__ import annotations

from datetime import datetime, timezone

from pykubelet.messages.pod import Pod, PodStatus

DEADLINE_EXCEEDED = "DeadlineExceeded"
DEADLINE_EXCEEDED_MESSAGE = "Pod was active on the node longer than the specified deadline"


def active_deadline_remaining(pod: Pod, now: float, start_time: float | None) -> float | None:
    """Seconds until the pod passes its active deadline (0 once it has); None when the
    spec sets no deadline or the pod has no start time yet. Times are Unix seconds."""
    deadline = pod.spec.active_deadline_seconds
    if deadline is None or start_time is None:
        return None
    return max(start_time + deadline - now, 0.0)


def past_active_deadline(pod: Pod, now: float, start_time: float | None) -> bool:
    """Active for activeDeadlineSeconds or more (Go compares with >=)."""
    remaining = active_deadline_remaining(pod, now, start_time)
    return remaining is not None and remaining <= 0


def start_time_of(pod: Pod, previous: PodStatus | None) -> float | None:
    """The pod's status.startTime as Unix seconds, from the status last computed for it,
    else from the pod as the API sent it, as Go reads it (status provider first)."""
    status = previous if previous is not None else pod.status
    return _unix_seconds(status.start_time) if status.start_time else None


def _unix_seconds(timestamp: str) -> float:
    """An RFC 3339 timestamp ("2026-11-22T22:07:06Z") as Unix seconds."""
    parsed = datetime.fromisoformat(timestamp)
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=timezone.utc)
    return parsed.timestamp()


__all__ = [
    "DEADLINE_EXCEEDED",
    "DEADLINE_EXCEEDED_MESSAGE",
    "active_deadline_remaining",
    "past_active_deadline",
    "start_time_of",
]
