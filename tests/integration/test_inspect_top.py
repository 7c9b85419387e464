"""pykubelet-inspect top against a running daemon under load: a static pod's manifest
rewritten with a new label every 50 ms keeps the file source, the pod config and the sync
loop busy; top, through the admin socket, shows their messages/s from two snapshots,
busiest first, as a table and as JSON lines."""

from __future__ import annotations

import json
import threading
from contextlib import contextmanager
from pathlib import Path

from tests.support.pods import phase, wait_for_pod

BUSY = """apiVersion: v1
kind: Pod
metadata: {{name: busy{n}, labels: {{round: "{round}"}}}}
spec:
  hostNetwork: true
  terminationGracePeriodSeconds: 1
  containers:
  - name: app
    image: busybox
    command: ["sh", "-c", "trap 'exit 0' TERM; while true; do sleep 0.2; done"]
"""


def install(manifests: Path, n: int, round: int) -> None:
    hidden = manifests / f".busy{n}.tmp"  # the file source skips hidden files: never half a manifest
    hidden.write_text(BUSY.format(n=n, round=round))
    hidden.rename(manifests / f"busy{n}.yaml")


@contextmanager
def relabelled(manifests: Path):
    """busy0's manifest rewritten with a new label every 50 ms while the block runs (at most
    60 s of it)."""
    done = threading.Event()

    def churn() -> None:
        for round in range(1, 1200):
            if done.wait(0.05):
                return
            install(manifests, 0, round)

    thread = threading.Thread(target=churn, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()


def test_top_shows_the_busy_actors_of_a_running_daemon(embedded_runtime, manifests, start_daemon):
    daemon = start_daemon("embedded", root_dir=Path(embedded_runtime.root))
    for n in range(3):
        install(manifests, n, 0)
    for n in range(3):
        wait_for_pod(daemon, f"busy{n}", phase("Running"), "Running")

    with relabelled(manifests):
        once = daemon.inspect("top", "--once", "--interval", "2")
        scripted = daemon.inspect("top", "--iterations", "2", "--interval", "1", "-o", "json")
    assert (once.returncode, once.stderr) == (0, "")
    lines = once.stdout.splitlines()
    assert lines[0].startswith(f"admin socket {daemon.admin_socket}") and "every 2s" in lines[0]
    assert lines[1].split() == ["ACTOR", "STATE", "RESTARTS", "MAILBOX", "MSG/S", "RECEIVED"]
    first = lines[2].split()
    assert float(first[4]) > 0, once.stdout  # the busiest actor received messages in the interval
    assert scripted.returncode == 0, scripted.stderr
    frames = [json.loads(line) for line in scripted.stdout.splitlines()]
    assert len(frames) == 2
    for frame in frames:
        actors = frame["actors"]
        paths = [a["path"] for a in actors]
        assert "root/sync-loop" in paths and "root/pleg" in paths and "root" in paths
        rates = [a["messages_per_second"] for a in actors if a["messages_per_second"] is not None]
        assert rates == sorted(rates, reverse=True) and rates[0] > 0
        busy = {a["path"] for a in actors if (a["messages_per_second"] or 0) > 0}
        assert {"root/pod-config", "root/sync-loop"} <= busy, actors
