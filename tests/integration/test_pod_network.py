"""The runtime's pod network on a real containerd started without a CNI configuration
(NetworkReady=false), in cluster mode: the Node is NotReady with the network's reason, a
hostNetwork pod runs, a pod on the pod network is held (NetworkNotReady, no sandbox tried);
once the configuration is written the Node turns Ready and the held pod starts with an
address of the bridge network."""

from __future__ import annotations

import os
import subprocess

import pytest

from tests.support.containerd import BUSYBOX_IMAGE, cni_plugins_installed
from tests.support.daemon import DaemonProcess
from tests.support.pods import TRAPPING_LOOP

NS = "/api/v1/namespaces/default"
NOT_READY = ("container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady "
             "message:Network plugin returns error: cni plugin not initialized")  # fmt: skip
BRIDGE = "pykt0"  # tests/support/containerd.py's network


def api_pod(apiserver, name: str) -> dict:
    answer = apiserver.admin.get(f"{NS}/pods/{name}")
    return answer.json() if answer.status_code == 200 else {}


def ready_condition(apiserver) -> dict:
    answer = apiserver.admin.get("/api/v1/nodes/node1")
    conditions = answer.json().get("status", {}).get("conditions", []) if answer.status_code == 200 else []
    return next((c for c in conditions if c["type"] == "Ready"), {})


def events_of(apiserver, name: str) -> list[dict]:
    return [e for e in apiserver.admin.get(f"{NS}/events").json()["items"] if e["involvedObject"]["name"] == name]


def pod(name: str, *, host_network: bool) -> dict:
    return {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
        "spec": {"nodeName": "node1", "hostNetwork": host_network, "terminationGracePeriodSeconds": 2,
                 "containers": [{"name": "app", "image": BUSYBOX_IMAGE, "command": TRAPPING_LOOP}]},
    }  # fmt: skip


def phase(apiserver, name: str) -> str:
    return api_pod(apiserver, name).get("status", {}).get("phase", "")


def remove_idle_bridge() -> None:
    """The bridge plugin leaves its bridge on the host; take it away when no pod uses it."""
    ports = f"/sys/class/net/{BRIDGE}/brif"
    if os.path.isdir(ports) and not os.listdir(ports):
        subprocess.run(["ip", "link", "delete", BRIDGE], check=False, capture_output=True)


@pytest.mark.containerd
def test_a_pod_network_pod_waits_for_network_ready_and_a_host_network_pod_does_not(
    apiserver, containerd_without_network, tmp_path
):
    if not cni_plugins_installed():
        pytest.skip("containerd: the bridge network needs containernetworking-plugins")
    containerd = containerd_without_network
    config = tmp_path / "kubelet.yaml"
    config.write_text("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
                      f"nodeStatusUpdateFrequency: 1s\npodLogsDir: {tmp_path / 'pod-logs'}\n")  # fmt: skip
    daemon = DaemonProcess(
        tmp_path / "root", f"--config={config}", f"--kubeconfig={apiserver.kubeconfig('system:node:node1')}",
        f"--container-runtime-endpoint={containerd.endpoint}", "--hostname-override=node1", "--node-ip=127.0.0.1",
    ).start()
    try:
        daemon.wait_for(lambda: ready_condition(apiserver).get("message") == NOT_READY,
                        "the Node NotReady for the network")  # fmt: skip
        assert ready_condition(apiserver)["status"] == "False"
        for name, host_network in (("agent", True), ("web", False)):
            created = apiserver.admin.post(f"{NS}/pods", json=pod(name, host_network=host_network))
            assert created.status_code == 201, created.text

        daemon.wait_for(lambda: phase(apiserver, "agent") == "Running", "the hostNetwork pod Running", timeout=40)
        daemon.wait_for(lambda: any(e["reason"] == "NetworkNotReady" for e in events_of(apiserver, "web")),
                        "NetworkNotReady for the pod-network pod", timeout=40)  # fmt: skip
        held = next(e for e in events_of(apiserver, "web") if e["reason"] == "NetworkNotReady")
        assert held["type"] == "Warning" and held["message"] == f"network is not ready: {NOT_READY}"
        status = api_pod(apiserver, "web")["status"]
        assert status["phase"] == "Pending"
        assert status["containerStatuses"][0]["state"] == {"waiting": {"reason": "ContainerCreating"}}
        assert "FailedCreatePodSandBox" not in {e["reason"] for e in events_of(apiserver, "web")}  # never tried
        assert "NetworkNotReady" not in {e["reason"] for e in events_of(apiserver, "agent")}
        table = daemon.inspect("pods").stdout
        rows = [line.split()[:4] for line in table.splitlines()]
        assert ["default", "web", "0/1", "ContainerCreating"] in rows, table

        containerd.add_cni_config()
        daemon.wait_for(lambda: ready_condition(apiserver).get("status") == "True", "the Node Ready", timeout=30)
        daemon.wait_for(lambda: phase(apiserver, "web") == "Running", "the held pod Running", timeout=30)
        assert api_pod(apiserver, "web")["status"]["podIP"].startswith("10.244.251.")
        assert api_pod(apiserver, "agent")["status"]["podIP"] == "127.0.0.1"
        log = daemon.log()
        assert "container runtime network ready" in log and "the pod network is ready: setting the pod up" in log
    finally:
        daemon.stop()
        containerd.stop()  # the sandboxes first (their network torn down), then the bridge
        remove_idle_bridge()
