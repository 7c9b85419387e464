"""Lifecycle hooks end to end on containerd: preStop runs before SIGTERM, also when the
manifest was removed while the kubelet was down; a failing postStart kills the container."""

from __future__ import annotations

import os
import signal

import pytest

from tests.support.pods import container, container_status, phase, pod_manifest, pods, wait_for_pod, write_manifest

RECORDING_TERM = ["sh", "-c", "trap 'echo TERM >> /hook/order; exit 0' TERM; while true; do sleep 0.1; done"]


def hooked_pod(hook_dir) -> dict:
    c = container(
        "c",
        RECORDING_TERM,
        lifecycle={"preStop": {"exec": {"command": ["sh", "-c", "echo preStop >> /hook/order"]}}},
        volumeMounts=[{"name": "hook", "mountPath": "/hook"}],
    )
    return pod_manifest(
        "hooks", [c], volumes=[{"name": "hook", "hostPath": {"path": str(hook_dir)}}], terminationGracePeriodSeconds=10
    )


@pytest.mark.containerd
def test_prestop_runs_before_sigterm(containerd, manifests, start_daemon, tmp_path):
    hook_dir = tmp_path / "hook"
    hook_dir.mkdir()
    daemon = start_daemon(containerd.endpoint)
    path = write_manifest(manifests, hooked_pod(hook_dir))
    wait_for_pod(daemon, "hooks", phase("Running"), "Running")
    os.unlink(path)
    daemon.wait_for(lambda: "hooks" not in pods(daemon), "the pod to be terminated")
    assert (hook_dir / "order").read_text().split() == ["preStop", "TERM"]


@pytest.mark.containerd
def test_prestop_still_runs_when_the_manifest_went_away_while_the_kubelet_was_down(
    containerd, manifests, start_daemon, tmp_path
):
    hook_dir = tmp_path / "hook"
    hook_dir.mkdir()
    daemon = start_daemon(containerd.endpoint)
    path = write_manifest(manifests, hooked_pod(hook_dir))
    wait_for_pod(daemon, "hooks", phase("Running"), "Running")
    daemon.process.send_signal(signal.SIGKILL)
    daemon.process.wait(timeout=10)
    os.unlink(path)
    again = start_daemon(containerd.endpoint)
    again.wait_for(lambda: (hook_dir / "order").exists() and "TERM" in (hook_dir / "order").read_text(),
                   "the orphan to be terminated")
    assert (hook_dir / "order").read_text().split() == ["preStop", "TERM"]


@pytest.mark.containerd
def test_failing_post_start_hook_kills_the_container(containerd, manifests, start_daemon):
    daemon = start_daemon(containerd.endpoint)
    failing = container(
        "c", ["sh", "-c", "trap 'exit 0' TERM; while true; do sleep 0.1; done"],
        lifecycle={"postStart": {"exec": {"command": ["sh", "-c", "exit 3"]}}},
    )
    write_manifest(manifests, pod_manifest("poststart", [failing], terminationGracePeriodSeconds=2))
    pod = wait_for_pod(
        daemon, "poststart", lambda p: container_status(p, "c")["restartCount"] >= 1, "a restart after the hook failed"
    )
    last = container_status(pod, "c")["lastState"]["terminated"]
    assert last["exitCode"] == 0  # it was stopped (SIGTERM, trapped), not crashed
