"""Eviction on the private containerd, in cluster mode, on a node that really runs short of
disk: the kubelet's root dir is a 64 MiB tmpfs (so nodefs, where emptyDirs live, is small)
and evictionHard is nodefs.available<50%. A BestEffort pod filling its emptyDir pushes the
node under the threshold: the node reports DiskPressure, that pod is evicted (Failed,
reason Evicted, the message naming the resource) while the pod within its requests keeps
running, and a pod sent meanwhile is refused at admission."""

from __future__ import annotations

import subprocess

import pytest

from tests.support.containerd import BUSYBOX_IMAGE

NS = "/api/v1/namespaces/default"
SLEEP = "trap 'exit 0' TERM; while true; do sleep 0.1; done"
SHORT_OF_DISK = "evictionHard: {nodefs.available: '50%'}\nevictionPressureTransitionPeriod: 60s\n"


@pytest.fixture
def small_root(tmp_path):
    """The daemon's root dir (tmp_path/root, as node_daemon uses) on a 64 MiB tmpfs."""
    root = tmp_path / "root"
    root.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(root)], check=True)
    yield root
    subprocess.run(["umount", "-l", str(root)], check=False)


def api_pod(name: str, script: str, *, requests: dict | None = None, volume: bool = False) -> dict:
    container: dict = {"name": "app", "image": BUSYBOX_IMAGE, "imagePullPolicy": "IfNotPresent",
                       "command": ["sh", "-c", script]}
    spec: dict = {"nodeName": "node1", "terminationGracePeriodSeconds": 1, "containers": [container]}
    if requests:
        container["resources"] = {"requests": requests}
    if volume:
        container["volumeMounts"] = [{"name": "scratch", "mountPath": "/scratch"}]
        spec["volumes"] = [{"name": "scratch", "emptyDir": {}}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"}, "spec": spec}


def status(apiserver, name: str) -> dict:
    return apiserver.admin.get(f"{NS}/pods/{name}").json().get("status", {})


def node_condition(apiserver, kind: str) -> str | None:
    answer = apiserver.admin.get("/api/v1/nodes/node1")
    if answer.status_code != 200:
        return None  # not registered yet
    node = answer.json()
    return next((c["status"] for c in node.get("status", {}).get("conditions", []) if c["type"] == kind), None)


@pytest.mark.containerd
@pytest.mark.parametrize("node_daemon", [SHORT_OF_DISK], indirect=True)
def test_a_pod_filling_the_disk_is_evicted_first_and_new_pods_are_refused(small_root, node_daemon, apiserver):
    daemon = node_daemon
    daemon.wait_for(lambda: node_condition(apiserver, "DiskPressure") == "False", "the node registered, no pressure")
    keeper = api_pod("keeper", SLEEP, requests={"cpu": "10m", "ephemeral-storage": "1Mi"})
    filler = api_pod("filler", f"dd if=/dev/zero of=/scratch/fill bs=1M count=40; {SLEEP}", volume=True)
    for pod in (keeper, filler):
        assert apiserver.admin.post(f"{NS}/pods", json=pod).status_code == 201

    daemon.wait_for(lambda: status(apiserver, "filler").get("reason") == "Evicted", "the filler evicted", timeout=60)
    evicted = status(apiserver, "filler")
    assert evicted["phase"] == "Failed"
    assert evicted["message"].startswith("The node was low on resource: ephemeral-storage. Threshold quantity: 32Mi")
    assert {"type": "DisruptionTarget", "status": "True", "reason": "TerminationByKubelet"}.items() <= next(
        c for c in evicted["conditions"] if c["type"] == "DisruptionTarget").items()
    assert status(apiserver, "keeper")["phase"] == "Running"  # within its requests: not first
    assert node_condition(apiserver, "DiskPressure") == "True"

    # While the condition holds (the transition period), new pods are refused as Go does.
    late = api_pod("late", SLEEP)
    assert apiserver.admin.post(f"{NS}/pods", json=late).status_code == 201
    daemon.wait_for(lambda: status(apiserver, "late").get("reason") == "Evicted", "the late pod refused")
    assert status(apiserver, "late")["message"] == "The node had condition: [DiskPressure]. "
    assert status(apiserver, "keeper")["phase"] == "Running"
