"""--runonce's judgement of one pod (Go's isPodRunning and runPod) and its retry schedule."""

from __future__ import annotations

import pytest

from pykubelet.messages.pod import (
    Container,
    ContainerState,
    ContainerStateRunning,
    ContainerStateTerminated,
    ContainerStateWaiting,
    ContainerStatus,
    ObjectMeta,
    Pod,
    PodSpec,
    PodStatus,
)
from pykubelet.pods.run_once import RUN_ONCE_MAX_RETRIES, Verdict, gave_up, judge, retry_delays

RUNNING = ContainerState(running=ContainerStateRunning(started_at="2026-11-27T05:00:00Z"))


def waiting(reason: str, message: str = "") -> ContainerState:
    return ContainerState(waiting=ContainerStateWaiting(reason=reason, message=message))


def exited(code: int) -> ContainerState:
    return ContainerState(terminated=ContainerStateTerminated(exit_code=code, reason="Error" if code else "Completed"))


def pod(phase: str = "Pending", containers: dict[str, ContainerState] | None = None,
        init: dict[str, ContainerState] | None = None, **status) -> Pod:
    containers = containers if containers is not None else {"app": waiting("ContainerCreating")}

    def statuses(states):
        return [ContainerStatus(name=n, ready=False, restart_count=0, state=s) for n, s in states.items()]

    return Pod(
        metadata=ObjectMeta(name="web-node1", namespace="default", uid="u1"),
        spec=PodSpec(containers=[Container(name=n, image="busybox") for n in containers],
                     init_containers=[Container(name=n, image="busybox") for n in (init or {})]),
        status=PodStatus(phase=phase, container_statuses=statuses(containers),
                         init_container_statuses=statuses(init or {}), **status),
    )


def test_retry_delays_double_from_1s_ten_times():
    delays = list(retry_delays())
    assert delays == [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]
    assert len(delays) == RUN_ONCE_MAX_RETRIES == 10


def test_a_pod_with_every_container_running_reached_its_goal():
    verdict = judge(pod("Running", {"app": RUNNING, "side": RUNNING}))
    assert (verdict.outcome, verdict.detail, verdict.reached_goal) == ("Running", "2/2 containers running", True)


def test_a_pod_with_one_container_still_creating_is_pending():
    verdict = judge(pod("Pending", {"app": RUNNING, "side": waiting("ContainerCreating")}))
    assert (verdict.outcome, verdict.done) == ("Pending", False)
    assert verdict.detail == "not running: side (ContainerCreating)"


def test_a_pod_not_on_the_board_yet_is_pending():
    assert judge(None).outcome == "Pending"


@pytest.mark.parametrize("reason", ["ErrImagePull", "ImagePullBackOff", "CrashLoopBackOff",
                                    "CreateContainerConfigError", "RunContainerError"])
def test_a_sync_error_fails_the_pod_at_once(reason):
    verdict = judge(pod("Pending", {"app": waiting(reason, "the message")}))
    assert (verdict.outcome, verdict.done, verdict.reached_goal) == ("Failed", True, False)
    assert verdict.detail == f"container app: {reason}: the message"


def test_an_init_container_in_back_off_fails_the_pod():
    verdict = judge(pod("Pending", {"app": waiting("PodInitializing")}, init={"setup": waiting("CrashLoopBackOff")}))
    assert verdict.outcome == "Failed" and verdict.detail.startswith("init container setup: CrashLoopBackOff")


def test_initializing_is_on_its_way():
    assert judge(pod("Pending", {"app": waiting("PodInitializing")}, init={"setup": RUNNING})).outcome == "Pending"


def test_a_pod_that_ran_to_completion_succeeded():
    verdict = judge(pod("Succeeded", {"job": exited(0)}))
    assert (verdict.outcome, verdict.reached_goal) == ("Succeeded", True)


def test_a_failed_pod_did_not_reach_its_goal_and_says_which_container_exited():
    verdict = judge(pod("Failed", {"job": exited(3)}))
    assert (verdict.outcome, verdict.reached_goal) == ("Failed", False)
    assert verdict.detail == "job exited 3"


def test_a_rejected_pod_names_the_reason():
    verdict = judge(pod("Failed", {}, reason="OutOfcpu", message="Node didn't have enough resource: cpu"), rejected=True)
    assert (verdict.outcome, verdict.reached_goal) == ("Rejected", False)
    assert verdict.detail == "OutOfcpu: Node didn't have enough resource: cpu"


def test_giving_up_names_the_retries_and_the_last_state():
    last = judge(pod("Pending", {"app": waiting("ContainerCreating")}))
    assert gave_up(last).detail == "containers not running after 10 retries (not running: app (ContainerCreating))"


def test_a_failed_mount_fails_a_pod_whose_containers_wait_to_be_created():
    verdict = judge(pod("Pending", {"app": waiting("ContainerCreating")}),
                    pod_errors=["FailedMount: hostPath /data: not a directory"])
    assert verdict == Verdict("Failed", "FailedMount: hostPath /data: not a directory")


def test_a_past_pod_error_does_not_fail_a_pod_that_runs():
    verdict = judge(pod("Running", {"app": RUNNING}), pod_errors=["FailedMount: once"])
    assert verdict.outcome == "Running"
