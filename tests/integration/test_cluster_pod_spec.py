"""A pod written for a real cluster, through the test API server (Node authorizer rules) to
a daemon on a private containerd: a Secret and a ConfigMap as env and files, the projected
kube-api-access token volume as the ServiceAccount admission writes it, non-root with a
read-only root filesystem. A ConfigMap edit reaches the running container (its readiness
probe reads the file); a missing key and a volume pykubelet cannot mount fail only their
own pods, each with the status and event a user would look for."""

from __future__ import annotations

import pytest

from tests.support.apiserver import objects
from tests.support.containerd import BUSYBOX_IMAGE

NS = "/api/v1/namespaces/default"
NODE = "system:node:node1"
TOKEN_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
# The probe passes when the container runs as its user on a read-only root and sees the
# Secret in its env, the token and CA files, its namespace, and the ConfigMap's newest
# greeting.
READY_WHEN = (
    'test "$(id -u)" = 1000 && ! touch /rootfs-write 2>/dev/null && '
    # The password by its digest, so that the spec itself does not hold the secret.
    'test "$(echo -n "$PASSWORD" | md5sum | cut -c1-12)" = 2ab96390c7db && '
    f'test -s {TOKEN_DIR}/token && test -s {TOKEN_DIR}/ca.crt && '
    f'test "$(cat {TOKEN_DIR}/namespace)" = default && test "$(cat /config/greeting)" = bonjour'
)
KUBE_API_ACCESS = {
    "name": "kube-api-access-x7k2p",
    "projected": {"defaultMode": 420, "sources": [
        {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
        {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
        {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}},
    ]},
}


def container(name: str, **extra) -> dict:
    return {"name": name, "image": BUSYBOX_IMAGE, "imagePullPolicy": "IfNotPresent",
            "command": ["sh", "-c", "trap 'exit 0' TERM; while true; do sleep 0.2; done"], **extra}


def api_pod(apiserver, name: str) -> dict:
    answer = apiserver.admin.get(f"{NS}/pods/{name}")
    return answer.json() if answer.status_code == 200 else {}


def ready(apiserver, name: str) -> bool:
    conditions = {c["type"]: c["status"] for c in api_pod(apiserver, name).get("status", {}).get("conditions", [])}
    return conditions.get("Ready") == "True"


def waiting_reason(apiserver, name: str) -> tuple[str, str] | None:
    for status in api_pod(apiserver, name).get("status", {}).get("containerStatuses", []):
        waiting = status.get("state", {}).get("waiting")
        if waiting:
            return waiting.get("reason", ""), waiting.get("message", "")
    return None


def events_of(apiserver, name: str) -> list[dict]:
    items = apiserver.admin.get(f"{NS}/events").json()["items"]
    return [e for e in items if e["involvedObject"]["name"] == name]


@pytest.mark.containerd
def test_a_pod_written_for_a_cluster_runs_unchanged_and_a_config_map_edit_reaches_it(node_daemon, apiserver, tmp_path):
    admin = apiserver.admin
    assert admin.post(f"{NS}/secrets", json=objects.secret("db", {"password": b"hunter2"})).status_code == 201
    assert admin.post(f"{NS}/configmaps", json=objects.configmap("app-config", {"greeting": "hello"})).status_code == 201
    shop = {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "shop", "namespace": "default"},
        "spec": {
            "nodeName": "node1", "terminationGracePeriodSeconds": 2, "serviceAccountName": "default",
            "securityContext": {"runAsUser": 1000, "runAsGroup": 1000, "runAsNonRoot": True, "fsGroup": 2000},
            "volumes": [{"name": "config", "configMap": {"name": "app-config"}}, KUBE_API_ACCESS],
            "containers": [container(
                "app",
                env=[{"name": "PASSWORD", "valueFrom": {"secretKeyRef": {"name": "db", "key": "password"}}}],
                securityContext={"readOnlyRootFilesystem": True, "allowPrivilegeEscalation": False},
                volumeMounts=[{"name": "config", "mountPath": "/config"},
                              {"name": "kube-api-access-x7k2p", "mountPath": TOKEN_DIR, "readOnly": True}],
                readinessProbe={"exec": {"command": ["sh", "-c", READY_WHEN]}, "periodSeconds": 1},
            )],
        },
    }
    needy = {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "needy", "namespace": "default"},
        "spec": {"nodeName": "node1", "terminationGracePeriodSeconds": 2, "containers": [container(
            "app", env=[{"name": "P", "valueFrom": {"secretKeyRef": {"name": "db", "key": "nope"}}}])]},
    }
    claims = {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "claims", "namespace": "default"},
        "spec": {"nodeName": "node1", "terminationGracePeriodSeconds": 2,
                 "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}],
                 "containers": [container("app", volumeMounts=[{"name": "data", "mountPath": "/data"}])]},
    }
    for pod in (shop, needy, claims):
        created = admin.post(f"{NS}/pods", json=pod)
        assert created.status_code == 201, created.text

    daemon = node_daemon
    daemon.wait_for(lambda: api_pod(apiserver, "shop").get("status", {}).get("phase") == "Running",
                    "the pod to be Running", timeout=60)
    assert not ready(apiserver, "shop")  # the greeting is still "hello"

    # The token: asked for through TokenRequest, bound to the pod, written on tmpfs.
    uid = api_pod(apiserver, "shop")["metadata"]["uid"]
    (request,) = apiserver.token_requests(user=NODE)
    assert request.token_request["spec"]["boundObjectRef"] == {"apiVersion": "v1", "kind": "Pod", "name": "shop", "uid": uid}
    assert request.token_request["spec"]["expirationSeconds"] == 3607
    volume = tmp_path / "root" / "pods" / uid / "volumes" / "kubernetes.io~projected" / "kube-api-access-x7k2p"
    claims_of_token = objects.token_claims((volume / "token").read_text())
    assert claims_of_token["kubernetes.io"]["pod"] == {"name": "shop", "uid": uid}
    assert (volume / "ca.crt").read_bytes() == apiserver.ca_pem
    assert any(line.split()[1] == str(volume) and line.split()[2] == "tmpfs" for line in open("/proc/mounts"))

    # The edit reaches the running container's file; its readiness probe turns it Ready.
    patched = admin.patch(f"{NS}/configmaps/app-config", json={"data": {"greeting": "bonjour"}},
                          headers={"Content-Type": "application/merge-patch+json"})
    assert patched.status_code == 200, patched.text
    daemon.wait_for(lambda: ready(apiserver, "shop"), "the ConfigMap edit to reach the pod", timeout=30)
    assert api_pod(apiserver, "shop")["status"]["containerStatuses"][0]["restartCount"] == 0

    # The others fail alone, each saying why.
    daemon.wait_for(lambda: waiting_reason(apiserver, "needy") is not None and
                    waiting_reason(apiserver, "needy")[0] == "CreateContainerConfigError", "needy's status", timeout=30)
    assert waiting_reason(apiserver, "needy")[1] == "couldn't find key nope in Secret default/db"
    daemon.wait_for(lambda: any(e["reason"] == "FailedMount" for e in events_of(apiserver, "claims")),
                    "claims' FailedMount event", timeout=30)
    failed_mount = next(e for e in events_of(apiserver, "claims") if e["reason"] == "FailedMount")
    assert failed_mount["type"] == "Warning"
    assert 'volume "data"' in failed_mount["message"] and "persistentVolumeClaim" in failed_mount["message"]

    # What the node read, it read by name: never a namespace's ConfigMaps or Secrets, and
    # no read of an object or a token was refused. (Other refusals may concern pods other
    # tests left in the shared containerd, which this daemon finds and stops.)
    node_requests = apiserver.requests(user=NODE)
    reads = [r for r in node_requests
             if r.resource in ("configmaps", "secrets", "services", "serviceaccounts", "serviceaccounts/token")]
    for record in reads:
        if record.resource in ("configmaps", "secrets") and record.verb in ("list", "watch"):
            assert "metadata.name" in record.query, record
    assert reads and [r for r in reads if r.status == 403] == []
    # Neither the secret's value nor the token is in any log line, event or /pods.
    token = (volume / "token").read_text()
    log = daemon.log()
    assert "hunter2" not in log and token not in log
    events = admin.get(f"{NS}/events").text
    pods = daemon.admin("GET", "/pods").text
    assert "hunter2" not in events + pods and token not in events + pods
