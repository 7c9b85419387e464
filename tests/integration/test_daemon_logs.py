"""The daemon's log lines as an operator selects them: --vmodule raises one file's verbosity
and no other's; and no secret reaches a log line at any verbosity: a cluster node at --v=10
(every V level and the libraries' debug lines) with a token kubeconfig runs a pod with a
Secret volume, a Secret in its env and the projected ServiceAccount token, a kubelet API
request carries that token, and its whole output is searched for each credential."""

from __future__ import annotations

import base64
import re

from pathlib import Path

import httpx
import pytest
import yaml

from tests.integration.test_cluster_pod_spec import KUBE_API_ACCESS, TOKEN_DIR, api_pod, container
from tests.integration.test_inspect_logs import install_example
from tests.support.apiserver import objects
from tests.support.daemon import DaemonProcess
from tests.support.pods import phase, wait_for_pod

NS = "/api/v1/namespaces/default"
PASSWORD = b"s3cr3t-Pa55word-9f1c"
# Every secret volume file is read by the probe, so the pod is Ready only once they are there.
READY_WHEN = f'test -s /secret/password && test -s /tls/tls.key && test -s {TOKEN_DIR}/token && test -n "$DB"'


def test_vmodule_shows_the_v2_lines_of_one_file_only(embedded_runtime, manifests, start_daemon):
    # sync_loop.py and pod_config.py both log the new static pod at V(2); only the first is named.
    daemon = start_daemon("embedded", "--vmodule=sync_l*=2", root_dir=Path(embedded_runtime.root))
    install_example(manifests)
    wait_for_pod(daemon, "hello", phase("Running"), "Running")
    daemon.wait_for(lambda: '"pod added from file"' in daemon.log(), "sync_loop.py's V(2) line")
    log = daemon.log()
    line = r'^I\d{4} [\d:.]+ +\d+ sync_loop\.py:\d+\] "pod added from file" pod="default/hello-node1"'
    assert re.search(line, log, re.M)
    assert "pods from file" not in log  # pod_config.py's V(2) line: --v is 0 there
    assert '"pod sandbox created"' not in log  # worker.py's


def pem_body(pem: bytes) -> list[str]:
    """The base64 lines of a PEM block, without its BEGIN/END lines."""
    return [line for line in pem.decode().splitlines() if line and not line.startswith("-----")]


@pytest.mark.containerd
def test_no_token_secret_or_key_in_the_log_at_the_highest_verbosity(tmp_path, apiserver, containerd):
    kubeconfig = apiserver.kubeconfig("system:node:node1", token=True)
    node_token = yaml.safe_load(kubeconfig.read_text())["users"][0]["user"]["token"]
    cert_pem, key_pem = apiserver.ca.issue("shop.default.svc")
    admin = apiserver.admin
    assert admin.post(f"{NS}/secrets", json=objects.secret("db", {"password": PASSWORD})).status_code == 201
    assert admin.post(f"{NS}/secrets", json=objects.secret(
        "shop-tls", {"tls.crt": cert_pem, "tls.key": key_pem}, type_="kubernetes.io/tls")).status_code == 201
    pod = {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "shop", "namespace": "default"},
        "spec": {
            "nodeName": "node1", "terminationGracePeriodSeconds": 2, "serviceAccountName": "default",
            "volumes": [{"name": "db", "secret": {"secretName": "db"}},
                        {"name": "tls", "projected": {"sources": [{"secret": {"name": "shop-tls"}}]}},
                        KUBE_API_ACCESS],
            "containers": [container(
                "app",
                env=[{"name": "DB", "valueFrom": {"secretKeyRef": {"name": "db", "key": "password"}}}],
                volumeMounts=[{"name": "db", "mountPath": "/secret"},
                              {"name": "tls", "mountPath": "/tls"},
                              {"name": "kube-api-access-x7k2p", "mountPath": TOKEN_DIR, "readOnly": True}],
                readinessProbe={"exec": {"command": ["sh", "-c", READY_WHEN]}, "periodSeconds": 1},
            )],
        },
    }
    assert admin.post(f"{NS}/pods", json=pod).status_code == 201

    daemon = DaemonProcess(
        tmp_path / "root",
        f"--kubeconfig={kubeconfig}",
        f"--container-runtime-endpoint={containerd.endpoint}",
        f"--client-ca-file={apiserver.ca_path}",
        "--hostname-override=node1",
        "--node-ip=127.0.0.1",
        "--node-status-update-frequency=1s",
        "--v=10",
    ).start()
    try:
        def ready() -> bool:
            conditions = api_pod(apiserver, "shop").get("status", {}).get("conditions", [])
            return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)

        daemon.wait_for(ready, "the pod to be Ready with its secrets mounted", timeout=90)
        uid = api_pod(apiserver, "shop")["metadata"]["uid"]
        volume = tmp_path / "root" / "pods" / uid / "volumes" / "kubernetes.io~projected" / "kube-api-access-x7k2p"
        sa_token = (volume / "token").read_text()
        # The kubelet API is asked with the pod's token: authentication sends it in a TokenReview.
        answer = httpx.get(f"https://127.0.0.1:{daemon.port}/pods", headers={"Authorization": f"Bearer {sa_token}"},
                           verify=False, timeout=10)
        assert answer.status_code in (200, 403)
        serving_key = (tmp_path / "root" / "pki" / "kubelet.key").read_bytes()
        daemon.wait_for(lambda: "/tokenreviews" in daemon.log(), "the TokenReview request to be logged at --v=10")
    finally:
        daemon.stop()

    log = daemon.log()
    assert re.search(r"^I\d{4} .*\] \"HTTP Request: GET https://", log, re.M), "--v=10 logs each API request"
    secrets = {
        "the node's kubeconfig token": node_token,
        "the ServiceAccount token": sa_token,
        "the ServiceAccount token's signature": sa_token.rsplit(".", 1)[1],
        "the secret's password": PASSWORD.decode(),
        "the secret's password, base64": base64.b64encode(PASSWORD).decode(),
    }
    for name, pem in (("the secret's private key", key_pem), ("the kubelet's serving key", serving_key)):
        for number, line in enumerate(pem_body(pem)):
            secrets[f"{name}, line {number + 1}"] = line
        secrets[f"{name}, base64"] = base64.b64encode(pem).decode()[:64]
    leaked = [name for name, value in secrets.items() if value in log]
    assert leaked == [], f"found in the log at --v=10: {leaked}"
