"""Chaos on real parts: pods are added, edited and removed while the daemon is killed with
SIGKILL at random moments (mid-start, mid-termination, mid-sync), then started again on
the same root dir. After each restart, checked from outside: every pod the manifests want
is Running, with exactly one container in containerd; a pod nobody touched keeps its
container (same ID, start time and restart count); removed pods are gone.

CI runs a short, seeded version; CHAOS_PODS=50 CHAOS_KILLS=20 CHAOS_SEED=<n> runs the long
one (docs/reliability.md)."""

from __future__ import annotations

import os
import random
import signal
import time

import pytest

from tests.support.pods import TRAPPING_LOOP, container, phase, pod_manifest, pods, write_manifest

PODS = int(os.environ.get("CHAOS_PODS", "10"))
KILLS = int(os.environ.get("CHAOS_KILLS", "5"))
SEED = int(os.environ.get("CHAOS_SEED", "14"))
CONVERGE = 60.0  # seconds a restarted daemon may take to bring every pod Running (a bound, not a target)

pytestmark = [pytest.mark.containerd, pytest.mark.chaos]


def manifest(name: str, revision: int) -> dict:
    env = [{"name": "REVISION", "value": str(revision)}]  # an edit: a new config hash, a new pod
    return pod_manifest(name, [container("c", TRAPPING_LOOP, env=env)], terminationGracePeriodSeconds=1)


def containers_by_pod(daemon) -> dict[str, tuple[str, str, int]]:
    """Running pods: name -> (container ID, started at, restart count)."""
    found = {}
    for name, pod in pods(daemon).items():
        statuses = pod.get("status", {}).get("containerStatuses") or []
        if phase("Running")(pod) and statuses and statuses[0].get("state", {}).get("running"):
            status = statuses[0]
            found[name] = (status["containerID"], status["state"]["running"]["startedAt"], status["restartCount"])
    return found


def running_in_containerd(containerd) -> list[str]:
    out = containerd.ctr("containers", "list", "-q", 'labels."io.cri-containerd.kind"==container')
    ids = [line.strip() for line in out.splitlines() if line.strip()]
    tasks = containerd.ctr("tasks", "list", "-q")
    running = {line.split()[0] for line in tasks.splitlines() if line.strip()}
    return [cid for cid in ids if cid in running]


def test_kill_9_at_random_moments_under_churn_loses_and_restarts_nothing(containerd, manifests, start_daemon):
    rng = random.Random(SEED)
    revisions = {f"p{i}": 0 for i in range(PODS)}
    for name, revision in revisions.items():
        write_manifest(manifests, manifest(name, revision))
    daemon = start_daemon(containerd.endpoint)
    daemon.wait_for(lambda: set(containers_by_pod(daemon)) == set(revisions), "every pod Running", timeout=CONVERGE)
    next_pod = PODS
    converge_times = []
    for kill in range(KILLS):
        stable = containers_by_pod(daemon)
        touched = set()
        for _ in range(rng.randint(1, 3)):  # churn: add, edit or remove a pod
            action = rng.choice(["add", "edit", "remove"] if len(revisions) > 2 else ["add"])
            if action == "add":
                name, next_pod = f"p{next_pod}", next_pod + 1
                revisions[name] = 0
                write_manifest(manifests, manifest(name, 0))
            else:
                name = rng.choice(sorted(revisions))
                if action == "edit":
                    revisions[name] += 1
                    write_manifest(manifests, manifest(name, revisions[name]))
                else:
                    del revisions[name]
                    os.unlink(manifests / f"{name}.json")
            touched.add(name)
        time.sleep(rng.uniform(0.0, 1.5))  # the kill lands mid-start, mid-termination or at rest
        daemon.process.send_signal(signal.SIGKILL)
        daemon.process.wait(timeout=10)

        restarted = time.monotonic()
        daemon = start_daemon(containerd.endpoint)
        daemon.wait_for(lambda: set(containers_by_pod(daemon)) == set(revisions) and
                        len(running_in_containerd(containerd)) == len(revisions),
                        f"kill {kill + 1}: every wanted pod Running, one container each", timeout=CONVERGE)
        converge_times.append(time.monotonic() - restarted)
        now = containers_by_pod(daemon)
        untouched = {name: value for name, value in stable.items() if name not in touched}
        assert {name: now.get(name) for name in untouched} == untouched, f"kill {kill + 1}: a pod nobody touched changed"
        # A pod added or edited just before the kill may have a container the runtime created
        # but never started: the new daemon starts another (restart count 1), as Go does.
    print(f"\nchaos: seed {SEED}, {PODS} pods, {KILLS} kills; every pod Running again after "
          f"{', '.join(f'{t:.1f}' for t in converge_times)} s")
