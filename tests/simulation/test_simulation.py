"""Seeded schedules of workload and faults played against the real actor tree on a
simulated runtime (harness.py) and, in cluster mode, a simulated API server (apiserver.py,
cluster.py), with the invariants checked after each.

  .venv/bin/python -m pytest -q -p no:cacheprovider tests/simulation          # CI: CI_SEEDS seeds
  SIM_SEEDS=100000 .venv/bin/python -m pytest -q -p no:cacheprovider tests/simulation -k sweep
  SIM_SEED=1234 .venv/bin/python -m pytest -q -p no:cacheprovider tests/simulation -k replay
  SIM_CLUSTER=1       replay a cluster-mode seed (-k replay)
  SIM_CLUSTER_SEEDS=N how many of the sweep's seeds run in cluster mode (default CI_CLUSTER_SEEDS)
  SIM_STOP_FAULTS=0   no StopContainer faults (hang, errors), which are on by default
  SIM_LOG=INFO        the daemon's log; SIM_DEBUG=1 convergence progress and stuck tasks

Bugs the simulation found, fixed, their shrunk schedules kept below as regressions:

BUG 1  A failed StopContainer (a timeout, UNAVAILABLE) during TerminatePod escaped the kill
  nursery as an ExceptionGroup, the pod worker crashed, its restart synced the removed pod
  again and it was never terminated: a deleted pod ran forever. Fixed: stops that fail are
  raised as one CriError after all have ended; the worker retries termination.

BUG 2  A supervisor cancelled (SIGTERM, its parent stopping it) while it restarted a child
  never stopped: trio left the shielded incarnation with the cancelled start() caller.
  Fixed: the handover is shielded.

BUG 3  (cluster mode) A pod deleted in the API server stayed there for ever, with its
  deletionTimestamp, when the status manager restarted after the pod's containers were gone
  but before its DELETE got through (here: the GETs failing with 500s, then a crash that
  restarts the tree from the runtime link). The pod config gave the deleted pod again, the
  sync loop made a worker only to terminate it, with no spec; the runtime held nothing of
  the pod, so its PodTerminated carried no name and the status manager could not delete it.
  Fixed: TerminatePod carries the pod's namespace and name when the sync loop knows them.

BUG 4  (the registry leak check) A pod worker's mailbox address outlived the pod workers'
  supervisor: restarted (here by the PLEG's crash, rest_for_one) while a worker of a pod
  being terminated lived, the registry kept that worker's address, one per such pod and
  restart, with whatever was queued in it. Fixed: a supervisor that ends closes the
  addresses of its dynamic children.

BUG 5  (cluster mode) A pod worker restarted after a crash went back to the spec it was
  made with: the pod's first image after an edit of it. It killed the container and
  started the old image, then got the newest spec again and restarted it once more: two
  needless restarts per crash. Fixed: a restarted worker goes on from the newest spec it
  published on the board.

BUG 6  (cluster mode) The same lost deletion as BUG 3, by another road: an API pod deleted,
  its containers stopped and removed, then the status manager alone crashed while its
  DELETE waited behind 500s. The record of the terminated pod (PodTerminated, already taken
  from the durable mailbox) died with that incarnation; nothing sent it again, so the API
  object kept its deletionTimestamp for ever. Fixed: the pod status board keeps the
  terminated API pods until the status manager has deleted them (or found them gone), and
  each whole look of a new incarnation reads them there.

BUG 7  (cluster mode) A restartPolicy Never API pod running under a killed kubelet ended
  Failed for good: the new kubelet's first syncs failed (the runtime down), and the worker
  published a placeholder status computed from an empty runtime view. The pod's API status
  said its container ran, so the empty view made it a lost container (ContainerStatusUnknown)
  and the Never pod Failed, a terminal phase no later sync may leave. Fixed: a pod whose API
  status names a container the runtime made gets no status until the runtime is read (Go
  computes none until the PLEG has read the pod). Seeds 1359 and 1365 of the long run.
"""

from __future__ import annotations

import os
import sys
import time

import pytest
import trio

from .harness import Result, run_schedule, shrink
from .schedule import ContainerSpec, PodSpec, Schedule, Step, generate

# Measured here (process CPU time, one core): 0.14 s a standalone seed (a schedule of 6-22
# steps and ~2-9 virtual minutes), 0.35 s a cluster-mode seed (a dozen more actors, and the
# API server in the same process). CI runs CI_SEEDS in all, the last CI_CLUSTER_SEEDS of
# them in cluster mode: about 80 s of CPU, in CI's 2 minutes.
CI_SEEDS = 500
CI_CLUSTER_SEEDS = 100
SEEDS = int(os.environ.get("SIM_SEEDS", CI_SEEDS))
CLUSTER_SEEDS = int(os.environ.get("SIM_CLUSTER_SEEDS", CI_CLUSTER_SEEDS * SEEDS // CI_SEEDS))
STOP_FAULTS = os.environ.get("SIM_STOP_FAULTS", "1") == "1"  # SIM_STOP_FAULTS=0: none aimed at StopContainer


def is_cluster_seed(seed: int) -> bool:
    return seed >= SEEDS - CLUSTER_SEEDS


def replay_command(seed: int, cluster: bool = False) -> str:
    env = [f"SIM_SEED={seed}"]
    if os.environ.get("PYTHONHASHSEED"):
        env.insert(0, f"PYTHONHASHSEED={os.environ['PYTHONHASHSEED']}")
    if cluster:
        env.append("SIM_CLUSTER=1")
    if not STOP_FAULTS:
        env.append("SIM_STOP_FAULTS=0")
    return " ".join(env) + " .venv/bin/python -m pytest -q -p no:cacheprovider tests/simulation -k replay"


def report(result: Result, *, shrunk: Schedule | None = None) -> str:
    schedule = result.schedule
    lines = [f"seed {schedule.seed} failed; replay with:", "  " + replay_command(schedule.seed, schedule.cluster),
             result.schedule.render(), "violations:"]
    lines += ["  " + v for v in result.violations[:20]]
    if result.notes:
        lines += ["unexpected actor crashes (let it crash; noted, not failed):"] + ["  " + n for n in result.notes[:10]]
    if shrunk is not None:
        lines += [f"shrunk to {len(shrunk.steps)} steps, still failing:", shrunk.render()]
    return "\n".join(lines)


def shrunk(schedule: Schedule) -> Schedule:
    return shrink(schedule, lambda candidate: not run_schedule(candidate).ok)


def test_sweep_of_seeded_schedules_keeps_every_invariant():
    started = time.perf_counter()
    failed: list[Result] = []
    for seed in range(SEEDS):
        cluster = is_cluster_seed(seed)
        result = run_schedule(generate(seed, stop_faults=STOP_FAULTS, cluster=cluster))
        if not result.ok:
            failed.append(result)
            print(f"FAIL: {replay_command(seed, cluster)}", file=sys.stderr)
    elapsed = time.perf_counter() - started
    print(f"{SEEDS} seeds ({CLUSTER_SEEDS} in cluster mode) in {elapsed:.1f}s ({SEEDS / elapsed:.1f} seeds/s), "
          f"{len(failed)} failed")
    if failed:
        first = failed[0]
        pytest.fail(
            f"{len(failed)} of {SEEDS} seeds broke an invariant: {[r.schedule.seed for r in failed][:50]}\n"
            + report(first, shrunk=shrunk(first.schedule))
        )


@pytest.mark.skipif("SIM_SEED" not in os.environ, reason="set SIM_SEED=<seed> to replay one seed")
def test_replay():
    seed = int(os.environ["SIM_SEED"])
    schedule = generate(seed, stop_faults=STOP_FAULTS, cluster=os.environ.get("SIM_CLUSTER") == "1")
    result = run_schedule(schedule)
    print(schedule.render())
    if not result.ok:
        pytest.fail(report(result, shrunk=shrunk(schedule)))


@pytest.mark.parametrize("cluster", [False, True], ids=["standalone", "cluster"])
def test_a_seed_replays_identically(cluster):
    schedule = generate(11, stop_faults=False, cluster=cluster)
    first, second = run_schedule(schedule), run_schedule(schedule)
    assert (first.trace, first.violations, first.virtual_seconds) == (
        second.trace, second.violations, second.virtual_seconds
    )


def test_the_harness_sees_a_container_restarted_without_cause():
    """The invariants can fail: a runtime that restarts a container on its own (here: the
    harness forgets an exit it caused) is caught by the restart count."""
    from . import harness

    schedule = Schedule(seed=3, steps=(
        Step(1.0, "add", pod=PodSpec("web", (ContainerSpec("main"),))),
        Step(20.0, "exit", pod_name="web", container="main", code=1),
    ), faults_end=20.0)
    original = harness._Model.exited
    harness._Model.exited = lambda self, pod, name, code: None
    try:
        result = run_schedule(schedule)
    finally:
        harness._Model.exited = original
    assert any("created 2 times, but only 1 allowed" in v for v in result.violations), result.violations


CLUSTER_SCHEDULE = Schedule(seed=5, cluster=True, steps=(
    Step(1.0, "add", pod=PodSpec("web", (ContainerSpec("main"),))),
    Step(2.0, "api-add", pod=PodSpec("front", (ContainerSpec("main"),), api=True)),
    Step(20.0, "exit", pod_name="front", container="main", code=1),
), faults_end=20.0)


def test_the_harness_sees_a_status_the_api_server_never_got(monkeypatch):
    """The cluster invariants can fail: a status manager that writes nothing is caught."""
    from pykubelet.actors import status_sync

    monkeypatch.setattr(status_sync, "status_patch", lambda old, new, uid: None)
    result = run_schedule(CLUSTER_SCHEDULE)
    assert any("the API's status of front" in v and "is not the kubelet's" in v for v in result.violations), result.violations
    assert any("the API's status of web" in v for v in result.violations), result.violations


def test_the_harness_sees_a_status_write_that_changes_nothing(monkeypatch):
    from pykubelet.actors import status_manager

    class Twice:  # every status patch sent again at once: the second changes nothing
        def __init__(self, client) -> None:
            self.client = client

        def __getattr__(self, name):
            return getattr(self.client, name)

        async def patch(self, *args, **kwargs):
            await self.client.patch(*args, **kwargs)
            return await self.client.patch(*args, **kwargs)

    original = status_manager.StatusManager.__init__
    monkeypatch.setattr(status_manager.StatusManager, "__init__",
                        lambda self, client, *a, **k: original(self, Twice(client), *a, **k))
    result = run_schedule(CLUSTER_SCHEDULE)
    assert any("PATCH pods/status of front changed nothing" in v for v in result.violations), result.violations


def test_the_harness_sees_mirror_pods_churned_by_a_restart(monkeypatch):
    """The mirror pod invariant can fail: issue 14's churn (a restarted kubelet deleting
    mirror pods as orphans before its board held the static pods again), put back."""
    from pykubelet.actors import mirror_pods

    original = mirror_pods.mirror_actions

    def before_the_fix(static, mirrors, node, desired=frozenset()):
        return original(static, mirrors, node, set())  # an orphan is whatever the board lacks

    monkeypatch.setattr(mirror_pods, "mirror_actions", before_the_fix)
    result = run_schedule(Schedule(seed=6, cluster=True, steps=(
        Step(1.0, "add", pod=PodSpec("web", (ContainerSpec("main"),))),
        Step(40.0, "kill-daemon"),
    ), faults_end=40.0))
    assert any("mirror pod web-localhost deleted while its static pod was there" in v for v in result.violations), \
        result.violations


def test_the_harness_sees_a_lease_that_is_never_renewed(monkeypatch):
    from pykubelet.actors import root

    def no_lease(settings, **_):
        async def run(ctx) -> None:
            await trio.sleep_forever()
        return run

    monkeypatch.setattr(root, "node_lease_actor", no_lease)
    result = run_schedule(CLUSTER_SCHEDULE)
    assert any("the node lease is not held or not renewed in time" in v for v in result.violations), result.violations


# -- regressions: schedules that found real bugs (shrunk) --


BUG_1_SCHEDULE = Schedule(seed=15, steps=(
    Step(45.44, "add", pod=PodSpec("web", (ContainerSpec("main", ignore_term=True), ContainerSpec("side"),
                                          ContainerSpec("helper")), restart_policy="OnFailure", grace=3)),
    Step(46.67, "hang-stop"),
    Step(51.63, "delete", pod_name="web"),
), faults_end=51.63)


def test_bug1_deleted_pod_stays_deleted_when_a_stop_times_out():
    result = run_schedule(BUG_1_SCHEDULE)
    assert result.ok, report(result)


BUG_2_SCHEDULE = Schedule(seed=48, steps=(
    Step(1.0, "add", pod=PodSpec("web", (ContainerSpec("main"),))),
    Step(20.0, "crash", path="root/log-rotation"),
    Step(20.0, "restart-daemon"),
), faults_end=20.0)


def test_bug2_sigterm_during_a_restart_stops_the_tree():
    result = run_schedule(BUG_2_SCHEDULE)
    assert result.ok, report(result)


BUG_3_SCHEDULE = Schedule(seed=51, cluster=True, steps=(
    Step(10.99, "api-fail", code=500, resource="pods", count=8),
    Step(21.76, "api-add", pod=PodSpec("proxy", (ContainerSpec("main"), ContainerSpec("side"), ContainerSpec("helper")),
                                       restart_policy="OnFailure", grace=5, api=True)),
    Step(46.56, "hang-stop"),
    Step(54.15, "api-delete", pod_name="proxy"),
    Step(56.76, "api-add", pod=PodSpec("report", (ContainerSpec("main"), ContainerSpec("side"), ContainerSpec("helper")),
                                       host_network=False, grace=2, api=True)),
    Step(87.42, "api-delete", pod_name="report"),
    Step(126.89, "crash", path="root/runtime-link"),
), faults_end=126.89)


BUG_4_SCHEDULE = Schedule(seed=478, steps=(
    Step(28.69, "add", pod=PodSpec("job", (ContainerSpec("main"), ContainerSpec("side"), ContainerSpec("helper")), grace=3)),
    Step(65.87, "kill-daemon"),
    Step(90.34, "runtime-down", duration=19.8),
    Step(100.05, "edit", pod=PodSpec("job", (ContainerSpec("main"), ContainerSpec("side"), ContainerSpec("helper")), grace=3,
                                     version=2)),
    Step(111.91, "delete", pod_name="job"),
    Step(115.32, "crash", path="root/pleg"),
), faults_end=115.32)


BUG_5_SCHEDULE = Schedule(seed=1041, cluster=True, steps=(
    Step(1.10, "api-add", pod=PodSpec("front", (ContainerSpec("main"),), grace=10, host_network=False, api=True)),
    Step(19.24, "api-edit", pod=PodSpec("front", (ContainerSpec("main", image=1),), grace=10, host_network=False, api=True)),
    Step(41.67, "crash", path="root/pod-workers/front"),
    Step(49.67, "crash", path="root/status-manager"),
), faults_end=49.67)


BUG_6_SCHEDULE = Schedule(seed=1377, cluster=True, steps=(
    Step(7.61, "api-add", pod=PodSpec("front", (ContainerSpec("main"), ContainerSpec("side"),
                                                ContainerSpec("helper", ignore_term=True)),
                                      restart_policy="Never", host_network=False, grace=10, api=True)),
    Step(8.20, "api-delete", pod_name="front"),
    Step(13.06, "api-fail", code=500, resource="pods", count=27),
    Step(36.21, "crash", path="root/status-manager"),
), faults_end=36.21)

BUG_7_SCHEDULE = Schedule(seed=1359, cluster=True, steps=(
    Step(43.69, "api-add", pod=PodSpec("queue", (ContainerSpec("main", ignore_term=True),), restart_policy="Never",
                                      host_network=False, grace=10, api=True)),
    Step(77.05, "api-hang", duration=31.8),
    Step(99.52, "kill-daemon"),
    Step(108.24, "runtime-down", duration=1.7),
), faults_end=108.24)


@pytest.mark.parametrize("schedule", [BUG_3_SCHEDULE, BUG_4_SCHEDULE, BUG_5_SCHEDULE, BUG_6_SCHEDULE,
                                      BUG_7_SCHEDULE], ids=[
    "bug3_a_deleted_api_pod_is_removed_after_the_status_manager_restarts",
    "bug4_a_restarted_pod_workers_supervisor_leaves_no_address_behind",
    "bug5_a_restarted_pod_worker_keeps_the_newest_spec",
    "bug6_a_terminated_api_pod_is_deleted_after_a_status_manager_crash",
    "bug7_a_running_never_pod_stays_running_when_the_runtime_is_down_at_restart",
])
def test_found_schedule_keeps_every_invariant(schedule):
    result = run_schedule(schedule)
    assert result.ok, report(result)
