"""Static pods end to end: manifests in a directory, the daemon as a subprocess, real
containers in a private containerd (and, for the first test, the embedded runtime)."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from tests.support.pods import (
    IGNORING_TERM,
    TRAPPING_LOOP,
    container,
    container_status,
    phase,
    pod_manifest,
    pods,
    wait_for_pod,
    waiting_reason,
    write_manifest,
)


def two_inits_two_containers() -> dict:
    return pod_manifest(
        "web",
        [container("app", TRAPPING_LOOP), container("sidecar", TRAPPING_LOOP)],
        init=[container("init-a", ["sh", "-c", "exit 0"]), container("init-b", ["sh", "-c", "echo ready"])],
        terminationGracePeriodSeconds=5,
    )


def assert_running_with_correct_statuses(pod: dict, runtime_name: str) -> None:
    status = pod["status"]
    assert pod["metadata"]["name"] == "web-node1"
    assert pod["metadata"]["annotations"]["kubernetes.io/config.source"] == "file"
    for name in ("init-a", "init-b"):
        init = container_status(pod, name, init=True)
        assert init["state"]["terminated"]["exitCode"] == 0
        assert init["state"]["terminated"]["reason"] == "Completed"
    for name in ("app", "sidecar"):
        running = container_status(pod, name)
        assert "running" in running["state"] and running["ready"] is True
        assert running["restartCount"] == 0
        assert running["containerID"].startswith(f"{runtime_name}://")
        assert running["imageID"]
    conditions = {c["type"]: c["status"] for c in status["conditions"]}
    assert conditions["Initialized"] == conditions["Ready"] == conditions["ContainersReady"] == "True"
    assert status["podIP"] and status["startTime"]


@pytest.mark.containerd
def test_pod_with_two_inits_and_two_containers_runs_on_containerd(containerd, manifests, start_daemon):
    daemon = start_daemon(containerd.endpoint)
    write_manifest(manifests, two_inits_two_containers())
    pod = wait_for_pod(daemon, "web", phase("Running"), "Running")
    assert_running_with_correct_statuses(pod, "containerd")
    table = daemon.inspect("pods")
    assert table.returncode == 0 and "web-node1" in table.stdout and "Running" in table.stdout


def test_pod_with_two_inits_and_two_containers_runs_on_the_embedded_runtime(
    embedded_runtime, manifests, start_daemon
):
    # The daemon re-uses the runtime the fixture started under its root dir (and the
    # fixture ends every container process, whatever the test did).
    daemon = start_daemon("embedded", root_dir=Path(embedded_runtime.root))
    write_manifest(manifests, two_inits_two_containers())
    pod = wait_for_pod(daemon, "web", phase("Running"), "Running")
    assert_running_with_correct_statuses(pod, "pykubelet-embedded")
    os.unlink(manifests / "web.json")
    daemon.wait_for(lambda: "web" not in pods(daemon), "the pod to be terminated")
    assert embedded_runtime.container_pids() == []


@pytest.mark.containerd
def test_crashing_container_under_always_is_restarted_with_back_off(containerd, manifests, start_daemon):
    daemon = start_daemon(containerd.endpoint)
    write_manifest(manifests, pod_manifest("crasher", [container("c", ["sh", "-c", "exit 1"])]))
    pod = wait_for_pod(
        daemon, "crasher", lambda p: waiting_reason(p, "c") == "CrashLoopBackOff", "CrashLoopBackOff", timeout=40
    )
    status = container_status(pod, "c")
    assert status["restartCount"] >= 1
    assert status["lastState"]["terminated"]["exitCode"] == 1
    assert "back-off 10s restarting failed container=c" in status["state"]["waiting"]["message"]
    # Back-off: the next restart comes 10s after the last exit, not at once.
    count = status["restartCount"]
    time.sleep(5)
    assert container_status(pods(daemon)["crasher"], "c")["restartCount"] == count
    wait_for_pod(daemon, "crasher", lambda p: container_status(p, "c")["restartCount"] == count + 1, "restart", 20)


@pytest.mark.containerd
@pytest.mark.parametrize(
    "policy, exit_code, expected",
    [("Never", 1, "Failed"), ("OnFailure", 0, "Succeeded"), ("Never", 0, "Succeeded")],
)
def test_restart_policy_decides_the_final_phase(containerd, manifests, start_daemon, policy, exit_code, expected):
    daemon = start_daemon(containerd.endpoint)
    write_manifest(
        manifests, pod_manifest("once", [container("c", ["sh", "-c", f"exit {exit_code}"])], restartPolicy=policy)
    )
    pod = wait_for_pod(daemon, "once", phase(expected), expected)
    assert container_status(pod, "c")["state"]["terminated"]["exitCode"] == exit_code
    assert container_status(pod, "c")["restartCount"] == 0


@pytest.mark.containerd
def test_removed_manifest_terminates_within_the_grace_period(containerd, manifests, start_daemon):
    daemon = start_daemon(containerd.endpoint)
    path = write_manifest(
        manifests,
        pod_manifest(
            "stubborn",
            [container("polite", TRAPPING_LOOP), container("deaf", IGNORING_TERM)],
            terminationGracePeriodSeconds=3,
        ),
    )
    wait_for_pod(daemon, "stubborn", phase("Running"), "Running")
    removed_at = time.monotonic()
    os.unlink(path)
    daemon.wait_for(lambda: "stubborn" not in pods(daemon), "the pod to be terminated", timeout=30)
    elapsed = time.monotonic() - removed_at
    assert 3 <= elapsed < 3 + 10, f"terminated after {elapsed:.1f}s with a 3s grace period"
    assert containerd_containers(containerd) == []


@pytest.mark.containerd
def test_missing_image_under_never_is_err_image_never_pull(containerd, manifests, start_daemon):
    daemon = start_daemon(containerd.endpoint)
    absent = dict(container("c", TRAPPING_LOOP), image="localhost/pykubelet/absent:1", imagePullPolicy="Never")
    write_manifest(manifests, pod_manifest("noimage", [absent]))
    pod = wait_for_pod(daemon, "noimage", lambda p: waiting_reason(p, "c") == "ErrImageNeverPull", "ErrImageNeverPull")
    assert pod["status"]["phase"] == "Pending"
    assert "is not present with pull policy of Never" in container_status(pod, "c")["state"]["waiting"]["message"]


def containerd_containers(containerd) -> list[str]:
    """The app containers in containerd (its sandboxes are containers too: left out)."""
    out = containerd.ctr("containers", "list", "-q", 'labels."io.cri-containerd.kind"==container')
    return [line for line in out.splitlines() if line.strip()]


def running_containers(daemon) -> dict[tuple[str, str], tuple[str, str, int]]:
    return {
        (name, status["name"]): (status["containerID"], status["state"]["running"]["startedAt"], status["restartCount"])
        for name, pod in pods(daemon).items()
        for status in pod["status"]["containerStatuses"]
    }


@pytest.mark.containerd
def test_kill_9_and_restart_adopts_every_container_without_restarting_one(containerd, manifests, start_daemon):
    daemon = start_daemon(containerd.endpoint)
    for i in range(5):
        write_manifest(manifests, pod_manifest(f"p{i}", [container("c", TRAPPING_LOOP)]))
    for i in range(5):
        wait_for_pod(daemon, f"p{i}", phase("Running"), "Running")
    before = running_containers(daemon)
    daemon.process.send_signal(signal.SIGKILL)
    daemon.process.wait(timeout=10)
    again = start_daemon(containerd.endpoint)
    for i in range(5):
        wait_for_pod(again, f"p{i}", phase("Running"), "Running again")
    time.sleep(3)  # a few relists and syncs: nothing may be restarted meanwhile
    assert running_containers(again) == before
    assert len(containerd_containers(containerd)) == 5


@pytest.mark.containerd
def test_containerd_restart_keeps_pods_running_without_duplicates(fresh_containerd, manifests, start_daemon):
    daemon = start_daemon(fresh_containerd.endpoint)
    write_manifest(manifests, pod_manifest("steady", [container("c", TRAPPING_LOOP)]))
    wait_for_pod(daemon, "steady", phase("Running"), "Running")
    before = running_containers(daemon)
    fresh_containerd.kill()
    time.sleep(1.5)
    fresh_containerd.restart()
    daemon.wait_for(lambda: daemon.healthz().status_code == 200, "healthz 200 after containerd is back")
    time.sleep(3)
    assert running_containers(daemon) == before
    assert len(containerd_containers(fresh_containerd)) == 1


@pytest.mark.containerd
def test_bad_manifest_is_reported_and_other_pods_are_unaffected(containerd, manifests, start_daemon):
    daemon = start_daemon(containerd.endpoint)
    write_manifest(manifests, pod_manifest("good", [container("c", TRAPPING_LOOP)]))
    (manifests / "bad.yaml").write_text("apiVersion: v1\nkind: Pod\nmetadata: {name: bad}\nspec:\n  containers: [\n")
    wait_for_pod(daemon, "good", phase("Running"), "Running")
    daemon.wait_for(lambda: "bad.yaml" in daemon.log(), "the bad manifest to be reported")
    assert "bad" not in pods(daemon)
    (manifests / "bad.yaml").write_text(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: bad}\nspec:\n  hostNetwork: true\n"
        f"  containers: [{{name: c, image: '{container('c', [])['image']}', "
        "command: [sh, -c, \"trap 'exit 0' TERM; while true; do sleep 0.1; done\"]}]\n"
    )
    wait_for_pod(daemon, "bad", phase("Running"), "Running after the fix")
