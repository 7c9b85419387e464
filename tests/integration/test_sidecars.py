"""Sidecars (init containers with restartPolicy Always) end to end on containerd."""

from __future__ import annotations

import os

import pytest

from tests.support.pods import container, container_status, phase, pod_manifest, pods, wait_for_pod, write_manifest


def recording(name: str) -> list[str]:
    return ["sh", "-c", f"trap 'echo {name} >> /out/order; exit 0' TERM; while true; do sleep 0.1; done"]


@pytest.mark.containerd
def test_sidecar_runs_beside_the_main_container_and_is_stopped_after_it(containerd, manifests, start_daemon, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    mount = {"volumeMounts": [{"name": "out", "mountPath": "/out"}]}
    sidecar = container("proxy", recording("proxy"), restartPolicy="Always", **mount)
    main = container("main", recording("main"), **mount)
    path = write_manifest(
        manifests,
        pod_manifest("withsidecar", [main], init=[sidecar], volumes=[{"name": "out", "hostPath": {"path": str(out)}}],
                     terminationGracePeriodSeconds=5),
    )
    daemon = start_daemon(containerd.endpoint)
    pod = wait_for_pod(daemon, "withsidecar", phase("Running"), "Running")
    assert "running" in container_status(pod, "proxy", init=True)["state"]
    assert "running" in container_status(pod, "main")["state"]
    os.unlink(path)
    daemon.wait_for(lambda: "withsidecar" not in pods(daemon), "the pod to be terminated")
    assert (out / "order").read_text().split() == ["main", "proxy"]


@pytest.mark.containerd
def test_a_sidecar_that_dies_is_restarted_while_the_main_container_runs(containerd, manifests, start_daemon):
    sidecar = container("flaky", ["sh", "-c", "sleep 1; exit 1"], restartPolicy="Always")
    main = container("main", ["sh", "-c", "trap 'exit 0' TERM; while true; do sleep 0.1; done"])
    write_manifest(manifests, pod_manifest("flakysidecar", [main], init=[sidecar], terminationGracePeriodSeconds=2))
    daemon = start_daemon(containerd.endpoint)
    pod = wait_for_pod(
        daemon, "flakysidecar", lambda p: container_status(p, "flaky", init=True)["restartCount"] >= 1, "a restart"
    )
    assert "running" in container_status(pod, "main")["state"]
    assert container_status(pod, "main")["restartCount"] == 0
