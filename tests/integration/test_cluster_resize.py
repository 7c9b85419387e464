"""In-place resize on the private containerd (pods/resize, GA in Kubernetes 1.35): a running
pod's new cpu and memory limits reach its cgroup and its container's without a restart."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.containerd import BUSYBOX_IMAGE
from tests.support.daemon import cgroup_root_for

NS = "/api/v1/namespaces/default"
Mi = 2**20


def memory_limit(folder: Path) -> int:
    name = "memory.limit_in_bytes" if (folder / "memory.limit_in_bytes").exists() else "memory.max"
    return int((folder / name).read_text())


def memory_dir(path: str) -> Path:
    v1 = Path("/sys/fs/cgroup/memory")
    return (v1 if v1.is_dir() else Path("/sys/fs/cgroup")) / path.lstrip("/")


@pytest.mark.containerd
def test_a_resized_pod_gets_its_new_limits_without_a_restart(node_daemon, apiserver):
    daemon = node_daemon
    app = {"name": "app", "image": BUSYBOX_IMAGE, "imagePullPolicy": "IfNotPresent",
           "command": ["sh", "-c", "trap 'exit 0' TERM; while true; do sleep 0.1; done"],
           "resources": {"requests": {"cpu": "100m", "memory": "32Mi"}, "limits": {"cpu": "200m", "memory": "64Mi"}}}
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "elastic", "namespace": "default"},
           "spec": {"nodeName": "node1", "terminationGracePeriodSeconds": 1, "containers": [app]}}
    assert apiserver.admin.post(f"{NS}/pods", json=pod).status_code == 201

    def status() -> dict:
        return apiserver.admin.get(f"{NS}/pods/elastic").json().get("status", {})

    daemon.wait_for(lambda: status().get("phase") == "Running" and status()["containerStatuses"][0].get("containerID"),
                    "the pod Running", timeout=60)
    uid = apiserver.admin.get(f"{NS}/pods/elastic").json()["metadata"]["uid"]
    container_id = status()["containerStatuses"][0]["containerID"].split("://")[1]
    pod_cgroup = memory_dir(f"{cgroup_root_for(daemon.root_dir)}/kubepods/burstable/pod{uid}")
    assert memory_limit(pod_cgroup) == 64 * Mi and memory_limit(pod_cgroup / container_id) == 64 * Mi

    resized = apiserver.admin.patch(
        f"{NS}/pods/elastic/resize", headers={"Content-Type": "application/strategic-merge-patch+json"},
        json={"spec": {"containers": [{"name": "app", "resources": {
            "requests": {"cpu": "100m", "memory": "32Mi"}, "limits": {"cpu": "400m", "memory": "128Mi"}}}]}})
    assert resized.status_code == 200, resized.text
    daemon.wait_for(lambda: memory_limit(pod_cgroup / container_id) == 128 * Mi, "the container's new memory limit")
    assert memory_limit(pod_cgroup) == 128 * Mi
    cpu = Path(str(pod_cgroup).replace("/memory/", "/cpu/"))
    if (cpu / "cpu.cfs_quota_us").exists():
        assert (cpu / container_id / "cpu.cfs_quota_us").read_text().strip() == "40000"
    after = status()["containerStatuses"][0]
    assert after["containerID"].endswith(container_id) and after["restartCount"] == 0  # resized in place
    daemon.wait_for(lambda: status()["containerStatuses"][0].get("resources", {}).get("limits", {}).get("memory")
                    == "128Mi", "the status to show the new limits")
    assert status()["containerStatuses"][0]["allocatedResources"] == {"cpu": "100m", "memory": "32Mi"}

    # A resize larger than the node stays pending, as Go reports it; nothing is applied.
    huge = apiserver.admin.patch(
        f"{NS}/pods/elastic/resize", headers={"Content-Type": "application/strategic-merge-patch+json"},
        json={"spec": {"containers": [{"name": "app", "resources": {
            "requests": {"cpu": "100m", "memory": "100Ti"}, "limits": {"cpu": "400m", "memory": "200Ti"}}}]}})
    assert huge.status_code == 200, huge.text

    def pending() -> dict:
        return next((c for c in status().get("conditions", []) if c["type"] == "PodResizePending"), {})

    daemon.wait_for(lambda: pending().get("reason") == "Infeasible", "the resize pending as Infeasible")
    assert pending()["message"].startswith("Node didn't have enough capacity: memory")
    assert memory_limit(pod_cgroup / container_id) == 128 * Mi

    # The QoS class may not change: the API server refuses such a resize.
    refused = apiserver.admin.patch(
        f"{NS}/pods/elastic/resize", headers={"Content-Type": "application/strategic-merge-patch+json"},
        json={"spec": {"containers": [{"name": "app", "resources": {
            "requests": {"cpu": "400m", "memory": "128Mi"}, "limits": {"cpu": "400m", "memory": "128Mi"}}}]}})
    assert refused.status_code == 422
