"""Cluster mode against the test API server: the daemon registers its Node, turns it
Ready, keeps its Lease renewed, and writes node status only when it changes."""

from __future__ import annotations

import time

import pytest

from tests.support.daemon import DaemonProcess

LEASES = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases"


def ready_condition(apiserver) -> dict:
    answer = apiserver.admin.get("/api/v1/nodes/node1")
    if answer.status_code != 200:
        return {}
    conditions = answer.json().get("status", {}).get("conditions", [])
    return next((c for c in conditions if c["type"] == "Ready"), {})


@pytest.mark.containerd
def test_node_registers_turns_ready_and_keeps_its_lease(node_daemon, apiserver):
    daemon = node_daemon
    daemon.wait_for(lambda: ready_condition(apiserver).get("status") == "True", "the Node to be Ready")
    node = apiserver.admin.get("/api/v1/nodes/node1").json()
    assert node["metadata"]["labels"]["kubernetes.io/hostname"] == "node1"
    assert {"type": "InternalIP", "address": "127.0.0.1"} in node["status"]["addresses"]
    assert node["status"]["nodeInfo"]["containerRuntimeVersion"].startswith("containerd://")
    assert node["status"]["capacity"]["pods"] == "110"
    assert ready_condition(apiserver)["reason"] == "KubeletReady"

    def lease() -> dict:
        answer = apiserver.admin.get(f"{LEASES}/node1")
        return answer.json() if answer.status_code == 200 else {}

    daemon.wait_for(lambda: lease().get("spec", {}).get("renewTime"), "the Lease to be created")
    first = lease()
    assert first["spec"]["holderIdentity"] == "node1" and first["spec"]["leaseDurationSeconds"] == 8
    assert first["metadata"]["ownerReferences"][0]["uid"] == node["metadata"]["uid"]
    daemon.wait_for(lambda: lease()["spec"]["renewTime"] != first["spec"]["renewTime"], "a renewal", timeout=10)

    # Steady state: the lease every 2s; node status only on change (nothing changes here).
    apiserver.clear_requests()
    time.sleep(6.5)
    status_writes = apiserver.requests(verb="patch", resource="nodes/status")
    lease_writes = apiserver.requests(verb="update", resource="leases")
    assert status_writes == []
    assert 2 <= len(lease_writes) <= 4


def api_pod(apiserver, name: str) -> dict:
    answer = apiserver.admin.get(f"/api/v1/namespaces/default/pods/{name}")
    return answer.json() if answer.status_code == 200 else {}


@pytest.mark.containerd
def test_pod_bound_to_the_node_runs_reports_status_and_is_deleted_gracefully(node_daemon, apiserver):
    from tests.support.containerd import BUSYBOX_IMAGE
    from tests.support.pods import TRAPPING_LOOP

    daemon = node_daemon
    pod = {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web", "namespace": "default"},
        "spec": {
            "nodeName": "node1", "hostNetwork": True, "terminationGracePeriodSeconds": 5,
            "containers": [{
                "name": "app", "image": BUSYBOX_IMAGE, "command": TRAPPING_LOOP,
                "readinessProbe": {"exec": {"command": ["true"]}, "periodSeconds": 1},
            }],
        },
    }
    created = apiserver.admin.post("/api/v1/namespaces/default/pods", json=pod)
    assert created.status_code == 201, created.text

    def running_and_ready() -> bool:
        status = api_pod(apiserver, "web").get("status", {})
        conditions = {c["type"]: c["status"] for c in status.get("conditions", [])}
        return status.get("phase") == "Running" and conditions.get("Ready") == "True"

    daemon.wait_for(running_and_ready, "the pod to be Running and Ready in the API", timeout=40)
    app = api_pod(apiserver, "web")["status"]["containerStatuses"][0]
    assert app["name"] == "app" and app["ready"] is True and app["restartCount"] == 0
    assert app["containerID"].startswith("containerd://") and "running" in app["state"]

    def event_reasons() -> set[str]:
        items = apiserver.admin.get("/api/v1/namespaces/default/events").json()["items"]
        return {e["reason"] for e in items if e["involvedObject"]["name"] == "web"}

    daemon.wait_for(lambda: {"Created", "Started"} <= event_reasons(), "the pod's events in the API")
    event = next(e for e in apiserver.admin.get("/api/v1/namespaces/default/events").json()["items"]
                 if e["reason"] == "Started")
    assert event["source"] == {"component": "kubelet", "host": "node1"}

    deleted = apiserver.admin.request("DELETE", "/api/v1/namespaces/default/pods/web", json={"gracePeriodSeconds": 5})
    assert deleted.status_code == 200, deleted.text
    assert api_pod(apiserver, "web")["metadata"]["deletionTimestamp"]
    daemon.wait_for(lambda: api_pod(apiserver, "web") == {}, "the pod object to be deleted by the kubelet", timeout=40)
    assert "web" not in {p["metadata"]["name"] for p in daemon.admin("GET", "/pods").json()["items"]}


@pytest.mark.containerd
def test_a_static_pod_gets_a_mirror_pod_recreated_after_deletion(apiserver, containerd, tmp_path):
    from tests.support.pods import TRAPPING_LOOP, container, pod_manifest, write_manifest

    manifests = tmp_path / "manifests"
    manifests.mkdir()
    write_manifest(manifests, pod_manifest("static", [container("c", TRAPPING_LOOP)], terminationGracePeriodSeconds=2))
    daemon = DaemonProcess(
        tmp_path / "root", f"--kubeconfig={apiserver.kubeconfig('system:node:node1')}",
        f"--container-runtime-endpoint={containerd.endpoint}", "--hostname-override=node1", "--node-ip=127.0.0.1",
        f"--pod-manifest-path={manifests}",
    ).start()
    try:
        def mirror() -> dict:
            pod = api_pod(apiserver, "static-node1")
            return pod if pod.get("status", {}).get("phase") == "Running" else {}

        daemon.wait_for(mirror, "the mirror pod Running in the API", timeout=40)
        first = mirror()
        assert first["metadata"]["annotations"]["kubernetes.io/config.mirror"]
        assert first["metadata"]["ownerReferences"][0]["kind"] == "Node"
        apiserver.admin.request("DELETE", "/api/v1/namespaces/default/pods/static-node1", json={"gracePeriodSeconds": 0})
        daemon.wait_for(lambda: mirror() and mirror()["metadata"]["uid"] != first["metadata"]["uid"],
                        "the mirror pod to be recreated", timeout=40)
        local = [p for p in daemon.admin("GET", "/pods").json()["items"] if p["metadata"]["name"] == "static-node1"]
        assert len(local) == 1  # the mirror pod itself is never run
    finally:
        daemon.stop()


@pytest.mark.containerd
def test_kill_9_and_restart_keeps_every_mirror_pod_and_container(apiserver, containerd, tmp_path):
    """A restarted kubelet finds its static pods and their mirror pods as they were: no
    mirror pod deleted and created again, no container restarted (Go waits for every
    source before it calls a mirror pod an orphan)."""
    from tests.support.pods import TRAPPING_LOOP, container, pod_manifest, write_manifest

    manifests = tmp_path / "manifests"
    manifests.mkdir()
    for name in ("one", "two", "three"):
        write_manifest(manifests, pod_manifest(name, [container("c", TRAPPING_LOOP)], terminationGracePeriodSeconds=2))
    argv = (f"--kubeconfig={apiserver.kubeconfig('system:node:node1')}", f"--container-runtime-endpoint={containerd.endpoint}",
            "--hostname-override=node1", "--node-ip=127.0.0.1", f"--pod-manifest-path={manifests}")

    def mirrors() -> dict[str, tuple[str, str]]:
        """name -> (mirror pod UID, container ID) for Running mirror pods."""
        found = {}
        for name in ("one", "two", "three"):
            pod = api_pod(apiserver, f"{name}-node1")
            statuses = pod.get("status", {}).get("containerStatuses") or [{}]
            if pod.get("status", {}).get("phase") == "Running" and statuses[0].get("containerID"):
                found[name] = (pod["metadata"]["uid"], statuses[0]["containerID"])
        return found

    daemon = DaemonProcess(tmp_path / "root", *argv).start()
    try:
        daemon.wait_for(lambda: len(mirrors()) == 3, "three mirror pods Running in the API", timeout=40)
        before = mirrors()
        daemon.process.kill()
        daemon.process.wait(timeout=10)
        restarted = time.time()
        daemon = DaemonProcess(tmp_path / "root", *argv).start()
        daemon.wait_for(lambda: daemon.log().count("all sources seen") == 2,
                        "the restarted kubelet to have seen every source", timeout=30)
        daemon.wait_for(lambda: daemon.healthz().status_code == 200, "healthz after the restart")
        # Rounds of the mirror pod actor (a list each, beside the API source's one): the
        # restarted kubelet has looked at the mirror pods at least twice with its pods back.
        daemon.wait_for(lambda: daemon.log().count("all sources seen") == 2 and len(apiserver.requests(
            verb="list", resource="pods", user="system:node:node1", since=restarted)) >= 3,
            "two mirror pod rounds after the restart", timeout=30)
        daemon.wait_for(lambda: len(mirrors()) == 3, "the three pods Running in the API again", timeout=30)
        assert mirrors() == before
        deletes = apiserver.requests(verb="delete", resource="pods", since=restarted)
        assert deletes == [], deletes
    finally:
        daemon.stop()
