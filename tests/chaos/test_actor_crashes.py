"""Soak, short: every actor of the running tree is crashed through the supervisor's fault
injection, round after round, under a steady workload on real containerd. Each time the
tree recovers by itself, the root never gives up (isolated crashes stay below every
restart intensity), no pod's container is restarted, and the daemon's memory does not grow.

Isolated crashes: one every 3.2 s, so that no supervisor sees more than its intensity (the
root's: 10 restarts in 30 s) from this alone. CI runs one round (each actor crashed once);
SOAK_ROUNDS=100 is the long soak, with the memory check (docs/reliability.md)."""

from __future__ import annotations

import os
import time

import pytest

from tests.support.pods import TRAPPING_LOOP, container, phase, pod_manifest, pods, wait_for_pod, write_manifest

ROUNDS = int(os.environ.get("SOAK_ROUNDS", "1"))
SPACING = 3.2  # seconds between crashes: under every restart intensity
# Actors a crash of which the test does not inject: the pod workers (their supervisor is
# crashed instead) and the server, which serves the injection itself.
SKIPPED = {"root/server"}

pytestmark = [pytest.mark.containerd, pytest.mark.chaos]


def tree(daemon) -> dict:
    return daemon.admin("GET", "/debug/actors").json()


def actors(node: dict) -> list[dict]:
    found = [node]
    for child in node["children"]:
        if not child["path"].startswith("root/pod-workers/") and not child["path"].startswith("root/probes/"):
            found += actors(child)
    return found


def rss_kb(daemon) -> int:
    with open(f"/proc/{daemon.process.pid}/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))


def test_every_actor_crashed_round_after_round_recovers_without_restarting_a_container(
    containerd, manifests, start_daemon
):
    for i in range(5):
        write_manifest(manifests, pod_manifest(f"p{i}", [container("c", TRAPPING_LOOP)]))
    daemon = start_daemon(containerd.endpoint, "--enable-fault-injection")
    for i in range(5):
        wait_for_pod(daemon, f"p{i}", phase("Running"), "Running")
    before = {name: pod["status"]["containerStatuses"][0]["containerID"] for name, pod in pods(daemon).items()}
    paths = [a["path"] for a in actors(tree(daemon)) if a["path"] != "root" and a["path"] not in SKIPPED]
    rss = []
    crashes = 0
    for _ in range(ROUNDS):
        for path in paths:
            answer = daemon.inspect("crash", path)
            assert answer.returncode == 0, answer.stderr
            crashes += 1
            daemon.wait_for(lambda: all(a["state"] == "running" for a in actors(tree(daemon))),
                            f"the tree running again after crashing {path}", timeout=30)
            time.sleep(SPACING)
        rss.append(rss_kb(daemon))
    assert daemon.process.poll() is None  # the root never gave up
    daemon.wait_for(lambda: {n: p["status"]["containerStatuses"][0]["containerID"]
                             for n, p in pods(daemon).items() if phase("Running")(p)} == before,
                    "every pod Running with its container", timeout=30)
    print(f"\nsoak: {crashes} crashes of {len(paths)} actors in {ROUNDS} rounds; RSS after each round "
          f"{', '.join(f'{kb / 1024:.1f}' for kb in rss)} MB")
    if ROUNDS >= 3:
        assert rss[-1] <= rss[0] * 1.2 + 5 * 1024  # no growth beyond noise (20 % + 5 MB)
