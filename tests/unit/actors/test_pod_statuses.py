"""The pod status board's running sum of Burstable cpu requests agrees with a sum over the
pods on the board, through adds, spec changes (an in-place resize) and removals."""

from __future__ import annotations

import random

import msgspec

from pykubelet.actors.pod_statuses import PodStatuses
from pykubelet.messages.pod import Pod, PodStatus
from pykubelet.pods.container_resources import burstable_cpu_request, qos_cgroup_cpu_shares


def pod(uid: str, resources: dict | None) -> Pod:
    container = {"name": "c", "image": "busybox", **({"resources": resources} if resources else {})}
    return msgspec.convert({"metadata": {"name": f"p-{uid}", "namespace": "default", "uid": uid},
                            "spec": {"containers": [container]}}, Pod)


RESOURCES = [
    None,  # BestEffort
    {"requests": {"cpu": "100m"}},  # Burstable, 100m
    {"requests": {"cpu": "250m", "memory": "10Mi"}},  # Burstable, 250m
    {"requests": {"memory": "10Mi"}},  # Burstable, no cpu
    {"limits": {"cpu": "1", "memory": "64Mi"}},  # Guaranteed: not in the tier
]


def test_burstable_cpu_requests_follow_adds_updates_and_removals():
    board = PodStatuses()
    board.set(pod("a", RESOURCES[1]), PodStatus(phase="Pending"))
    board.set(pod("b", RESOURCES[2]), PodStatus(phase="Pending"))
    board.set(pod("c", RESOURCES[4]), PodStatus(phase="Pending"))
    assert board.burstable_cpu_requests() == 350
    board.set(board.pod("a"), PodStatus(phase="Running"))  # a status change: same spec
    assert board.burstable_cpu_requests() == 350
    board.set(pod("a", RESOURCES[2]), PodStatus(phase="Running"))  # resized to 250m
    assert board.burstable_cpu_requests() == 500
    board.remove("b")
    board.remove("b")  # twice: nothing more taken off
    assert board.burstable_cpu_requests() == 250
    board.set(pod("a", RESOURCES[4]), PodStatus(phase="Running"))  # now Guaranteed
    assert board.burstable_cpu_requests() == 0


def test_burstable_cpu_requests_equal_the_sum_over_the_board_after_random_changes():
    rng = random.Random(15)
    board = PodStatuses()
    for _ in range(2000):
        uid = str(rng.randrange(40))
        if rng.random() < 0.3:
            board.remove(uid)
        elif rng.random() < 0.5 and board.pod(uid) is not None:
            board.set(board.pod(uid), PodStatus(phase=rng.choice(["Pending", "Running"])))
        else:
            board.set(pod(uid, rng.choice(RESOURCES)), PodStatus(phase="Pending"))
        assert board.burstable_cpu_requests() == sum(burstable_cpu_request(p) for p in board.pods())
    assert qos_cgroup_cpu_shares(board.pods())["burstable"] > 2  # the walk ends with Burstable pods
