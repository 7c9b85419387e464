"""--runonce's decisions (Go: pkg/kubelet/runonce.go): whether a pod reached its goal, and
when to look again. Pure: fed a pod as the status board shows it, returns a verdict.

A pod's goal is every container of its spec running (Go's isPodRunning), or, for a pod
that runs to completion, Succeeded. A sync error (a container waiting with an error
reason, ErrImagePull, CrashLoopBackOff, ..., or a failed volume mount or sandbox) fails the
pod at once, as Go's runPod returns SyncPod's error; a pod merely not there yet is looked
at again after 1 s, doubling, and fails after runOnceMaxRetries (10) such waits.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterator, Literal, Sequence

from pykubelet.messages.pod import ContainerStatus, Pod

from .backoff import ExponentialBackoff

RUN_ONCE_MANIFEST_DELAY = 1.0  # Go's runOnceManifestDelay: the sources' first set must come by then
RUN_ONCE_MAX_RETRIES = 10  # runOnceMaxRetries
RUN_ONCE_RETRY_DELAY = 1.0  # runOnceRetryDelay
RUN_ONCE_RETRY_DELAY_BACKOFF = 2  # runOnceRetryDelayBackoff

# Waiting reasons that are not errors: the pod is on its way.
_ON_ITS_WAY = frozenset({"", "ContainerCreating", "PodInitializing"})

Outcome = Literal["Running", "Succeeded", "Failed", "Rejected", "Pending"]


@dataclass(frozen=True)
class Verdict:
    """Where a pod stands: `done` once it reached its goal or failed for good."""

    outcome: Outcome
    detail: str

    @property
    def done(self) -> bool:
        return self.outcome != "Pending"

    @property
    def reached_goal(self) -> bool:
        return self.outcome in ("Running", "Succeeded")


def retry_delays() -> Iterator[float]:
    """The waits between two looks at a pod: 1 s doubling, runOnceMaxRetries of them (Go
    looks once more after the last, then gives up): 1, 2, 4, ... 512 s."""
    backoff = ExponentialBackoff(RUN_ONCE_RETRY_DELAY, math.inf, factor=RUN_ONCE_RETRY_DELAY_BACKOFF)
    for _ in range(RUN_ONCE_MAX_RETRIES):
        yield backoff.next_delay()


def judge(pod: Pod | None, *, rejected: bool = False, pod_errors: Sequence[str] = ()) -> Verdict:
    """One look at a pod on the status board (None: no status published yet). pod_errors:
    why its pod-level steps failed ("FailedMount: ...", "FailedCreatePodSandBox: ..."),
    which Go's SyncPod returns as errors too, while its containers wait in ContainerCreating."""
    if pod is None:
        return Verdict("Pending", "no status yet")
    status = pod.status
    if rejected:
        return Verdict("Rejected", f"{status.reason}: {status.message}".strip(": "))
    if status.phase == "Succeeded":
        return Verdict("Succeeded", "every container exited 0")
    if status.phase == "Failed":
        return Verdict("Failed", _failed_detail(pod))
    kinds = (("init container", status.init_container_statuses), ("container", status.container_statuses))
    for kind, statuses in kinds:
        for container in statuses:
            problem = _sync_error(container)
            if problem:
                return Verdict("Failed", f"{kind} {container.name}: {problem}")
    by_name = {c.name: c for c in status.container_statuses}
    not_running = [c.name for c in pod.spec.containers if not _running(by_name.get(c.name))]
    if not not_running:
        count = len(pod.spec.containers)
        return Verdict("Running", f"{count}/{count} containers running")
    if pod_errors:
        return Verdict("Failed", pod_errors[-1])
    return Verdict("Pending", f"not running: {', '.join(_waiting(by_name, name) for name in not_running)}")


def gave_up(last: Verdict) -> Verdict:
    """The verdict on a pod still pending after the last retry."""
    return Verdict("Failed", f"containers not running after {RUN_ONCE_MAX_RETRIES} retries ({last.detail})")


def _running(status: ContainerStatus | None) -> bool:
    return status is not None and status.state.running is not None


def _sync_error(container: ContainerStatus) -> str:
    waiting = container.state.waiting
    if waiting is None or waiting.reason in _ON_ITS_WAY:
        return ""
    return f"{waiting.reason}: {waiting.message}" if waiting.message else waiting.reason


def _waiting(by_name: dict[str, ContainerStatus], name: str) -> str:
    status = by_name.get(name)
    if status is None:
        return name
    if status.state.waiting is not None and status.state.waiting.reason:
        return f"{name} ({status.state.waiting.reason})"
    if status.state.terminated is not None:
        return f"{name} (exited {status.state.terminated.exit_code})"
    return name


def _failed_detail(pod: Pod) -> str:
    status = pod.status
    exited = [
        f"{c.name} exited {c.state.terminated.exit_code}"
        for c in (*status.init_container_statuses, *status.container_statuses)
        if c.state.terminated is not None and c.state.terminated.exit_code != 0
    ]
    parts = [p for p in (status.reason, status.message, ", ".join(exited)) if p]
    return "; ".join(parts) or "the pod failed"
