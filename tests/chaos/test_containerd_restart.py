"""Chaos on real parts: containerd itself stopped under a workload with churn (SIGKILL and
a clean SIGTERM in turn) and started again on the same root, state and socket. Its shims
outlive it, so the containers do too. While it is down the kubelet must notice (healthz
500) and a new pod is added; once containerd answers again, checked from outside: the
runtime link reconnected (healthz 200, pykubelet_runtime_up 1), every wanted pod is
Running (the one added meanwhile too) with one ready sandbox and one running container,
and a pod nobody touched keeps its container ID, start time and restart count.

CI runs two restarts (one of each kind); CHAOS_CONTAINERD_RESTARTS=<n> CHAOS_PODS=<n>
CHAOS_SEED=<n> CHAOS_DOWN=<seconds> run the long one (docs/reliability.md)."""

from __future__ import annotations

import os
import random
import statistics
import time

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.chaos.workload import Churn, containers_by_pod, runtime_pods

PODS = int(os.environ.get("CHAOS_PODS", "6"))
RESTARTS = int(os.environ.get("CHAOS_CONTAINERD_RESTARTS", "2"))
SEED = int(os.environ.get("CHAOS_SEED", "14"))
DOWN = float(os.environ.get("CHAOS_DOWN", "2"))  # most seconds containerd stays down once the kubelet saw it
CONVERGE = 60.0  # seconds the node may take to be whole again (a bound, not a target)

pytestmark = [pytest.mark.containerd, pytest.mark.chaos]


def runtime_up(daemon) -> bool:
    families = text_string_to_metric_families(daemon.admin("GET", "/metrics").text)
    return any(s.name == "pykubelet_runtime_up" and s.value == 1 for f in families for s in f.samples)


def whole(daemon, containerd, wanted: set[str]) -> bool:
    """Every wanted pod Running in the kubelet's eyes, and exactly one ready sandbox and one
    running container each in containerd's; nothing else running."""
    return (daemon.healthz().status_code == 200 and runtime_up(daemon)
            and set(containers_by_pod(daemon)) == wanted
            and runtime_pods(containerd) == {name: (1, 1) for name in wanted})


def test_containerd_restarted_under_churn_keeps_every_container(fresh_containerd, manifests, start_daemon):
    containerd = fresh_containerd
    workload = Churn(manifests, random.Random(SEED), PODS)
    rng = workload.rng
    daemon = start_daemon(containerd.endpoint)
    daemon.wait_for(lambda: whole(daemon, containerd, set(workload.revisions)), "every pod Running", CONVERGE)
    recoveries, reconnects, downtimes = [], [], []
    for n in range(RESTARTS):
        how = "SIGKILL" if n % 2 == 0 else "SIGTERM"
        stable = containers_by_pod(daemon)
        touched = workload.steps(2)
        time.sleep(rng.uniform(0.0, 1.0))  # the stop lands mid-start, mid-termination or at rest
        stopped = time.monotonic()
        containerd.kill() if how == "SIGKILL" else containerd.terminate()
        daemon.wait_for(lambda: daemon.healthz().status_code == 500, f"restart {n + 1}: healthz 500 without containerd")
        touched.add(workload.add("down"))  # a pod created while containerd is down
        time.sleep(rng.uniform(0.0, DOWN))  # an outage, not a check: nothing is asserted of it
        containerd.restart()
        answered = time.monotonic()
        downtimes.append(answered - stopped)
        wanted = set(workload.revisions)
        daemon.wait_for(lambda: daemon.healthz().status_code == 200 and runtime_up(daemon),
                        f"restart {n + 1} ({how}): the runtime link connected again", CONVERGE)
        reconnects.append(time.monotonic() - answered)
        daemon.wait_for(lambda: whole(daemon, containerd, wanted),
                        f"restart {n + 1} ({how}): every wanted pod Running, one sandbox and container each", CONVERGE)
        recoveries.append(time.monotonic() - answered)
        now = containers_by_pod(daemon)
        untouched = {name: value for name, value in stable.items() if name not in touched}
        assert {name: now.get(name) for name in untouched} == untouched, f"restart {n + 1}: a pod nobody touched changed"
    assert daemon.process.poll() is None and "Traceback" not in daemon.log()
    print(f"\nchaos: seed {SEED}, {PODS} pods, {RESTARTS} containerd restarts (SIGKILL and SIGTERM in turn); "
          f"down {statistics.median(downtimes):.1f} s (median); the runtime link connected again "
          f"{', '.join(f'{t:.1f}' for t in reconnects)} s and every pod Running "
          f"{', '.join(f'{t:.1f}' for t in recoveries)} s after containerd answered")
