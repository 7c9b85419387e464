"""Cluster mode when the API server misbehaves: 500s, hangs and resets for a while (a
few seconds here; the mechanism is the same for a minute). Pods keep running, the lease
and node status resume within a period after recovery, statuses converge to the truth,
and a 410 on the watch re-lists without restarting a container."""

from __future__ import annotations

import time

import pytest

from tests.integration.test_cluster_node import LEASES, api_pod
from tests.support.containerd import BUSYBOX_IMAGE
from tests.support.pods import TRAPPING_LOOP


def create_pod(apiserver, name: str) -> None:
    pod = {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
        "spec": {"nodeName": "node1", "hostNetwork": True, "terminationGracePeriodSeconds": 2,
                 "containers": [{"name": "app", "image": BUSYBOX_IMAGE, "command": TRAPPING_LOOP}]},
    }
    assert apiserver.admin.post("/api/v1/namespaces/default/pods", json=pod).status_code == 201


def container_id_in_api(apiserver, name: str) -> str:
    statuses = api_pod(apiserver, name).get("status", {}).get("containerStatuses", [])
    return statuses[0].get("containerID", "") if statuses else ""


def local_pod(daemon, name: str) -> dict:
    return next((p for p in daemon.admin("GET", "/pods").json()["items"] if p["metadata"]["name"] == name), {})


def renew_time(apiserver) -> str:
    answer = apiserver.admin.get(f"{LEASES}/node1")
    return answer.json()["spec"]["renewTime"] if answer.status_code == 200 else ""


@pytest.mark.containerd
@pytest.mark.parametrize("fault", ["fail", "hang", "reset"])
def test_pods_keep_running_through_an_api_outage_and_everything_resumes(node_daemon, apiserver, fault):
    daemon = node_daemon
    create_pod(apiserver, "steady")
    daemon.wait_for(lambda: container_id_in_api(apiserver, "steady"), "the pod's status in the API", timeout=40)
    container_id = container_id_in_api(apiserver, "steady")

    getattr(apiserver, fault)(duration=6)  # node identities only: the admin client is spared
    time.sleep(6.5)
    local = local_pod(daemon, "steady")
    assert local["status"]["phase"] == "Running"
    assert local["status"]["containerStatuses"][0]["containerID"] == container_id  # never restarted
    assert daemon.healthz().status_code == 200

    before = renew_time(apiserver)
    daemon.wait_for(lambda: renew_time(apiserver) != before, "the lease to be renewed after recovery", timeout=12)
    # Every pod's status in the API converges to the kubelet's truth.
    daemon.wait_for(
        lambda: api_pod(apiserver, "steady")["status"]["containerStatuses"][0]["containerID"]
        == local_pod(daemon, "steady")["status"]["containerStatuses"][0]["containerID"],
        "the API's status to equal the kubelet's", timeout=20,
    )


@pytest.mark.containerd
def test_watch_410_relists_without_restarting_any_container(node_daemon, apiserver):
    daemon = node_daemon
    create_pod(apiserver, "one")
    daemon.wait_for(lambda: container_id_in_api(apiserver, "one"), "the pod's status in the API", timeout=40)
    container_id = container_id_in_api(apiserver, "one")
    apiserver.clear_requests()
    apiserver.expire_watches()
    daemon.wait_for(
        lambda: any(r.verb == "list" and r.resource == "pods" for r in apiserver.requests()),
        "a re-list after 410", timeout=20,
    )
    create_pod(apiserver, "two")  # the new watch works
    daemon.wait_for(lambda: container_id_in_api(apiserver, "two"), "the second pod to run", timeout=40)
    assert container_id_in_api(apiserver, "one") == container_id


@pytest.mark.containerd
def test_kill_9_during_status_updates_then_restart_converges_without_restarts(node_daemon, apiserver, tmp_path):
    from tests.support.daemon import DaemonProcess

    daemon = node_daemon
    for name in ("a", "b", "c"):
        create_pod(apiserver, name)
    for name in ("a", "b", "c"):
        daemon.wait_for(lambda n=name: container_id_in_api(apiserver, n), f"pod {name} in the API", timeout=40)
    before = {n: container_id_in_api(apiserver, n) for n in ("a", "b", "c")}
    daemon.process.kill()
    daemon.process.wait(timeout=10)
    again = DaemonProcess(daemon.root_dir, *daemon.argv[3:]).start()  # same flags, same root dir
    try:
        again.wait_for(lambda: {p["metadata"]["name"] for p in again.admin("GET", "/pods").json()["items"]}
                       >= {"a", "b", "c"}, "the pods to be adopted", timeout=40)
        time.sleep(3)
        assert {n: container_id_in_api(apiserver, n) for n in ("a", "b", "c")} == before
        for name in ("a", "b", "c"):
            local = local_pod(again, name)["status"]["containerStatuses"][0]
            assert local["containerID"] == before[name] and local["restartCount"] == 0
    finally:
        again.stop()


@pytest.mark.containerd
def test_an_existing_node_is_reconciled(apiserver, tmp_path, containerd):
    from tests.support.daemon import DaemonProcess

    node = {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": "node1", "labels": {"kubernetes.io/hostname": "stale", "team": "blue"}}}
    assert apiserver.admin.post("/api/v1/nodes", json=node).status_code == 201
    daemon = DaemonProcess(
        tmp_path / "root", f"--kubeconfig={apiserver.kubeconfig('system:node:node1')}",
        f"--container-runtime-endpoint={containerd.endpoint}", "--hostname-override=node1", "--node-ip=127.0.0.1",
    ).start()
    try:
        def reconciled() -> bool:
            current = apiserver.admin.get("/api/v1/nodes/node1").json()
            labels = current["metadata"].get("labels", {})
            return labels.get("kubernetes.io/hostname") == "node1" and bool(current.get("status", {}).get("nodeInfo"))

        daemon.wait_for(reconciled, "the existing Node to be reconciled", timeout=30)
        assert apiserver.admin.get("/api/v1/nodes/node1").json()["metadata"]["labels"]["team"] == "blue"
    finally:
        daemon.stop()
