"""Probes end to end on containerd: readiness flips Ready, a failing liveness probe
restarts the container, a crashed probe worker comes back without touching the pod."""

from __future__ import annotations

import time

import pytest

from tests.support.daemon import free_port
from tests.support.pods import container, container_status, phase, pod_manifest, pods, wait_for_pod, write_manifest


def ready(pod: dict) -> bool:
    conditions = {c["type"]: c["status"] for c in pod.get("status", {}).get("conditions", [])}
    return conditions.get("Ready") == "True"


def httpd_pod(port: int, www) -> dict:
    serve = [
        "sh", "-c",
        f"httpd -f -p 127.0.0.1:{port} -h /www & pid=$!; trap 'kill $pid; exit 0' TERM; wait",
    ]
    web = container(
        "web", serve,
        readinessProbe={"httpGet": {"path": "/ready", "port": port}, "periodSeconds": 1, "failureThreshold": 1},
        volumeMounts=[{"name": "www", "mountPath": "/www"}],
    )
    return pod_manifest("web", [web], volumes=[{"name": "www", "hostPath": {"path": str(www)}}],
                        terminationGracePeriodSeconds=2)


@pytest.mark.containerd
def test_http_readiness_probe_flips_ready(containerd, manifests, start_daemon, tmp_path):
    www = tmp_path / "www"
    www.mkdir()
    daemon = start_daemon(containerd.endpoint, "--node-ip=127.0.0.1")
    write_manifest(manifests, httpd_pod(free_port(), www))
    pod = wait_for_pod(daemon, "web", phase("Running"), "Running")
    assert not ready(pod) and container_status(pod, "web")["ready"] is False
    (www / "ready").write_text("ok\n")
    wait_for_pod(daemon, "web", ready, "Ready once /ready answers 200", timeout=20)
    (www / "ready").unlink()
    pod = wait_for_pod(daemon, "web", lambda p: not ready(p), "not Ready once /ready answers 404", timeout=20)
    conditions = {c["type"]: c for c in pod["status"]["conditions"]}
    assert conditions["ContainersReady"]["reason"] == "ContainersNotReady"
    assert container_status(pod, "web")["restartCount"] == 0  # readiness never restarts


@pytest.mark.containerd
def test_failing_exec_liveness_probe_restarts_the_container(containerd, manifests, start_daemon):
    daemon = start_daemon(containerd.endpoint, "--node-ip=127.0.0.1")
    sick_after_2s = ["sh", "-c", "touch /tmp/healthy; trap 'exit 0' TERM; sleep 2; rm /tmp/healthy; "
                                 "while true; do sleep 0.1; done"]
    live = container(
        "app", sick_after_2s,
        livenessProbe={"exec": {"command": ["cat", "/tmp/healthy"]}, "periodSeconds": 1, "failureThreshold": 2},
    )
    write_manifest(manifests, pod_manifest("sick", [live], terminationGracePeriodSeconds=2))
    pod = wait_for_pod(daemon, "sick", lambda p: container_status(p, "app")["restartCount"] >= 1,
                       "a restart after the liveness probe failed", timeout=40)
    status = container_status(pod, "app")
    assert status["lastState"]["terminated"]["exitCode"] == 0  # stopped by SIGTERM (trapped)
    events = daemon.admin("GET", "/events").json()["items"]
    mine = [e for e in events if e["involvedObject"]["name"].startswith("sick")]
    assert any(e["reason"] == "Killing" for e in mine)
    unhealthy = [e for e in mine if e["reason"] == "Unhealthy"]
    assert unhealthy and unhealthy[0]["type"] == "Warning"
    assert unhealthy[0]["message"].startswith("Liveness probe failed:")
    assert unhealthy[0]["involvedObject"]["fieldPath"] == "spec.containers{app}"


@pytest.mark.containerd
def test_a_crashed_probe_worker_restarts_without_touching_the_pod(containerd, manifests, start_daemon, tmp_path):
    www = tmp_path / "www"
    www.mkdir()
    (www / "ready").write_text("ok\n")
    daemon = start_daemon(containerd.endpoint, "--node-ip=127.0.0.1", "--enable-fault-injection")
    write_manifest(manifests, httpd_pod(free_port(), www))
    pod = wait_for_pod(daemon, "web", ready, "Ready", timeout=30)
    container_id = container_status(pod, "web")["containerID"]
    tree = daemon.admin("GET", "/debug/actors").json()
    probes = next(c for c in tree["children"] if c["name"] == "probes")
    worker = next(c for c in probes["children"] if c["name"].endswith(".web.readiness"))
    crashed = daemon.inspect("crash", worker["path"])
    assert crashed.returncode == 0, crashed.stderr

    def restarted() -> bool:
        tree = daemon.admin("GET", "/debug/actors").json()
        probes = next(c for c in tree["children"] if c["name"] == "probes")
        return any(c["path"] == worker["path"] and c["restarts"] == 1 for c in probes["children"])

    daemon.wait_for(restarted, "the probe worker to be restarted")
    time.sleep(2)
    pod = pods(daemon)["web"]
    assert ready(pod) and container_status(pod, "web")["containerID"] == container_id
