"""A restart of the test API server (kill() or terminate(), then restart()) keeps what it
stored, as a kube-apiserver on its etcd does: same port and CA, the objects and the
resourceVersion go on; the watch history and run-time faults are gone."""

from __future__ import annotations

import httpx
import pytest

from tests.support.apiserver import objects

NODE = "system:node:node1"
PODS = "/api/v1/namespaces/default/pods"


@pytest.mark.parametrize("stop", ["kill", "terminate"])
def test_stored_objects_and_versions_outlive_a_restart(apiserver, stop):
    node1 = apiserver.client(NODE)
    assert node1.post("/api/v1/nodes", json=objects.node("node1")).status_code == 201
    created = apiserver.admin.post(PODS, json=objects.pod("web", "node1")).json()
    deleted = apiserver.admin.post(PODS, json=objects.pod("gone", "node1")).json()
    apiserver.admin.request("DELETE", f"{PODS}/gone", json={"gracePeriodSeconds": 0})
    version = int(apiserver.admin.get(PODS).json()["metadata"]["resourceVersion"])
    port = apiserver.port
    apiserver.fail(500)

    getattr(apiserver, stop)()
    with pytest.raises(httpx.TransportError):
        apiserver.admin.get(PODS)
    apiserver.restart()

    assert apiserver.port == port
    pods = apiserver.admin.get(PODS).json()
    assert [p["metadata"]["uid"] for p in pods["items"]] == [created["metadata"]["uid"]]
    assert deleted["metadata"]["uid"] not in str(pods)
    assert int(pods["metadata"]["resourceVersion"]) >= version
    assert node1.get("/api/v1/nodes/node1").status_code == 200  # the same CA; the fault is gone
    # A watch from before the restart: 410, as from a restarted watch cache; from now: fine.
    old = node1.get(PODS.replace("/namespaces/default", ""), params={
        "fieldSelector": "spec.nodeName=node1", "watch": "1", "resourceVersion": str(version - 1), "timeoutSeconds": "1"})
    assert '"code":410' in old.text.replace(" ", "")
    assert apiserver.admin.post(PODS, json=objects.pod("after", "node1")).status_code == 201
    assert int(apiserver.admin.get(f"{PODS}/after").json()["metadata"]["resourceVersion"]) > version
