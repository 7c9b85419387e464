"""A real kubectl against pykubelet's kubelet API, through the test API server, which proxies
pods/log, pods/exec, pods/portforward and nodes/proxy to the node's kubelet as
kube-apiserver does (tests/support/apiserver/kubelet_proxy.py): with its own client
certificate, which pykubelet verifies against --client-ca-file (the node_daemon fixture
passes the API server's CA) and authorizes by a SubjectAccessReview. What users type — `kubectl logs -f`, `kubectl exec -i`,
`kubectl port-forward`, `kubectl get --raw .../proxy/stats/summary` — works unchanged."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time

import pytest

from tests.support.containerd import BUSYBOX_IMAGE
from tests.support.daemon import free_port

NS = "/api/v1/namespaces/default"
KUBECTL = shutil.which("kubectl")
pytestmark = [
    pytest.mark.containerd,
    pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed (apt-get install kubernetes-client)"),
]
# Numbered lines, one every 0.1 s after the first ten; a tiny HTTP-ish server on :PORT that
# answers each connection with one line; exits at once on SIGTERM.
CHATTY = ("trap 'exit 0' TERM; (while true; do echo pong | nc -l -p {port} >/dev/null; done) & "
          "i=0; while true; do i=$((i+1)); echo line $i; if [ $i -gt 10 ]; then sleep 0.1; fi; done")


def kubectl(apiserver, *args: str, input: str | None = None, timeout: float = 30) -> subprocess.CompletedProcess:
    assert KUBECTL is not None
    return subprocess.run([KUBECTL, f"--kubeconfig={apiserver.kubeconfig('admin')}", *args], input=input,
                          capture_output=True, text=True, timeout=timeout)


def test_kubectl_logs_exec_port_forward_and_node_proxy_reach_the_kubelet(node_daemon, apiserver):
    daemon = node_daemon
    port = free_port()
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "chatty", "namespace": "default"},
           "spec": {"nodeName": "node1", "terminationGracePeriodSeconds": 2,
                    "containers": [{"name": "app", "image": BUSYBOX_IMAGE, "imagePullPolicy": "IfNotPresent",
                                    "command": ["sh", "-c", CHATTY.format(port=port)]}]}}
    assert apiserver.admin.post(f"{NS}/pods", json=pod).status_code == 201
    daemon.wait_for(lambda: apiserver.admin.get(f"{NS}/pods/chatty").json().get("status", {}).get("phase")
                    == "Running", "the pod to run", timeout=60)

    # kubectl logs: the tail, then -f that keeps delivering new lines.
    tail = kubectl(apiserver, "logs", "chatty", "--tail=3")
    assert tail.returncode == 0, tail.stderr
    assert [line.split()[0] for line in tail.stdout.splitlines()] == ["line"] * 3
    assert KUBECTL is not None
    follow = subprocess.Popen([KUBECTL, f"--kubeconfig={apiserver.kubeconfig('admin')}", "logs", "-f", "chatty",
                               "--tail=1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert follow.stdout is not None
        seen = [int(follow.stdout.readline().split()[1]) for _ in range(5)]
        assert seen == list(range(seen[0], seen[0] + 5))
    finally:
        follow.kill()
        follow.wait()

    # kubectl exec -i: stdin reaches the command, stdout and the exit code come back.
    echoed = kubectl(apiserver, "exec", "-i", "chatty", "--", "sh", "-c", "tr a-z A-Z; exit 7", input="hello kubelet\n")
    assert echoed.stdout == "HELLO KUBELET\n", echoed.stderr
    assert echoed.returncode == 7

    # kubectl port-forward: a local port reaches the port inside the pod.
    local = free_port()
    forward = subprocess.Popen([KUBECTL, f"--kubeconfig={apiserver.kubeconfig('admin')}", "port-forward",
                                "pod/chatty", f"{local}:{port}"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
    try:
        assert forward.stdout is not None
        first = forward.stdout.readline()
        assert "Forwarding from 127.0.0.1" in first, forward.stderr.read() if forward.stderr else first
        assert _read_line(local) == b"pong\n"
    finally:
        forward.terminate()
        forward.wait(10)

    # kubectl get --raw through nodes/proxy: what metrics pipelines read.
    raw = kubectl(apiserver, "get", "--raw", "/api/v1/nodes/node1/proxy/stats/summary")
    assert raw.returncode == 0, raw.stderr
    summary = json.loads(raw.stdout)
    assert summary["node"]["nodeName"] == "node1"
    assert "chatty" in [p["podRef"]["name"] for p in summary["pods"]]
    healthz = kubectl(apiserver, "get", "--raw", "/api/v1/nodes/node1/proxy/healthz")
    assert healthz.stdout == "ok", healthz.stderr

    # A container that does not exist: the kubelet's 404 reaches the user.
    missing = kubectl(apiserver, "logs", "chatty", "-c", "nope")
    assert missing.returncode != 0 and "nope" in missing.stderr


def _read_line(port: int, timeout: float = 20.0) -> bytes:
    """The first line the forwarded port answers (the pod's server restarts between
    connections, so a connection that gets nothing is retried)."""
    deadline = time.monotonic() + timeout
    while True:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as conn:
            conn.sendall(b"ping\n")
            data = conn.recv(100)
        if data or time.monotonic() > deadline:
            return data
        time.sleep(0.1)
