"""Patches as kube-apiserver applies them: strategic merge patch follows the schemas'
patch strategies (pod conditions merge by type, containerStatuses is atomic and replaced
whole, node addresses and conditions merge by type), merge patch and JSON patch; /status
writes change only status, main-resource writes never change it."""

from __future__ import annotations

from tests.support.apiserver import objects

POD = "/api/v1/namespaces/default/pods/web"
SMP = {"Content-Type": "application/strategic-merge-patch+json"}
MERGE = {"Content-Type": "application/merge-patch+json"}


def _running_status() -> dict:
    return {
        "phase": "Running",
        "conditions": [
            {"type": "Initialized", "status": "True", "lastProbeTime": None, "lastTransitionTime": "2026-01-01T00:00:00Z"},
            {"type": "Ready", "status": "False", "lastProbeTime": None, "lastTransitionTime": "2026-01-01T00:00:00Z"},
        ],
        "containerStatuses": [
            {"name": "main", "ready": False, "restartCount": 0, "image": "busybox:1.36", "imageID": "",
             "state": {"running": {"startedAt": "2026-01-01T00:00:01Z"}}},
            {"name": "side", "ready": True, "restartCount": 2, "image": "busybox:1.36", "imageID": "",
             "state": {"running": {"startedAt": "2026-01-01T00:00:01Z"}}},
        ],
    }


def _two_container_pod(apiserver) -> dict:
    pod = objects.pod("web", "node1")
    pod["spec"]["containers"].append({"name": "side", "image": "busybox:1.36"})
    assert apiserver.admin.post("/api/v1/namespaces/default/pods", json=pod).status_code == 201
    node1 = apiserver.client("system:node:node1")
    response = node1.patch(f"{POD}/status", json={"status": _running_status()}, headers=SMP)
    assert response.status_code == 200, response.text
    return response.json()


def test_strategic_merge_patch_merges_conditions_by_type_and_keeps_the_rest(apiserver):
    _two_container_pod(apiserver)
    node1 = apiserver.client("system:node:node1")
    patch = {
        "metadata": {"uid": apiserver.admin.get(POD).json()["metadata"]["uid"]},
        "status": {
            "$setElementOrder/conditions": [{"type": "Initialized"}, {"type": "Ready"}, {"type": "ContainersReady"}],
            "conditions": [
                {"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:05Z"},
                {"type": "ContainersReady", "status": "True", "lastProbeTime": None, "lastTransitionTime": "2026-01-01T00:00:05Z"},
            ],
        },
    }
    response = node1.patch(f"{POD}/status", json=patch, headers=SMP)
    assert response.status_code == 200, response.text
    conditions = response.json()["status"]["conditions"]
    assert [(c["type"], c["status"]) for c in conditions] == [("Initialized", "True"), ("Ready", "True"), ("ContainersReady", "True")]
    assert conditions[1]["lastTransitionTime"] == "2026-01-01T00:00:05Z"
    assert response.json()["status"]["phase"] == "Running"
    assert [c["name"] for c in response.json()["status"]["containerStatuses"]] == ["main", "side"]


def test_container_statuses_are_atomic_a_patch_replaces_the_whole_list(apiserver):
    # PodStatus.containerStatuses is +listType=atomic with no patch strategy: the real server
    # replaces the list, so a kubelet must always send every container's status.
    _two_container_pod(apiserver)
    node1 = apiserver.client("system:node:node1")
    only_main = {"name": "main", "ready": True, "restartCount": 0, "image": "busybox:1.36", "imageID": "",
                 "state": {"running": {"startedAt": "2026-01-01T00:00:01Z"}}}
    response = node1.patch(f"{POD}/status", json={"status": {"containerStatuses": [only_main]}}, headers=SMP)
    statuses = response.json()["status"]["containerStatuses"]
    assert [(s["name"], s["ready"]) for s in statuses] == [("main", True)]


def test_strategic_merge_patch_delete_directive_and_null_remove_entries(apiserver):
    _two_container_pod(apiserver)
    node1 = apiserver.client("system:node:node1")
    patch = {"status": {"conditions": [{"type": "Ready", "$patch": "delete"}], "phase": None}}
    status = node1.patch(f"{POD}/status", json=patch, headers=SMP).json()["status"]
    assert [c["type"] for c in status["conditions"]] == ["Initialized"]
    assert "phase" not in status


def test_status_writes_ignore_spec_and_metadata_and_main_writes_ignore_status(apiserver):
    before = _two_container_pod(apiserver)
    node1 = apiserver.client("system:node:node1")
    patch = {"metadata": {"labels": {"sneaky": "yes"}}, "spec": {"activeDeadlineSeconds": 5},
             "status": {"message": "hello"}}
    after = node1.patch(f"{POD}/status", json=patch, headers=MERGE).json()
    assert after["status"]["message"] == "hello"
    assert after["spec"] == before["spec"] and "labels" not in after["metadata"]
    main = apiserver.admin.patch(POD, json={"metadata": {"labels": {"a": "b"}}, "status": {"phase": "Failed"}},
                                 headers=MERGE).json()
    assert main["metadata"]["labels"] == {"a": "b"} and main["status"]["phase"] == "Running"


def test_an_unchanged_patch_does_not_bump_the_resource_version(apiserver):
    stored = _two_container_pod(apiserver)
    node1 = apiserver.client("system:node:node1")
    again = node1.patch(f"{POD}/status", json={"status": {"phase": "Running"}}, headers=SMP).json()
    assert again["metadata"]["resourceVersion"] == stored["metadata"]["resourceVersion"]


def test_patch_with_a_stale_resource_version_conflicts(apiserver):
    stored = _two_container_pod(apiserver)
    node1 = apiserver.client("system:node:node1")
    node1.patch(f"{POD}/status", json={"status": {"message": "one"}}, headers=MERGE)
    stale = {"metadata": {"resourceVersion": stored["metadata"]["resourceVersion"]}, "status": {"message": "two"}}
    response = node1.patch(f"{POD}/status", json=stale, headers=MERGE)
    assert response.status_code == 409 and response.json()["reason"] == "Conflict"


def test_node_status_patch_merges_addresses_and_conditions_by_type(apiserver):
    node = objects.node("node1")
    node["status"]["addresses"] = [{"type": "InternalIP", "address": "10.0.0.1"}, {"type": "Hostname", "address": "node1"}]
    node["status"]["conditions"] = [{"type": "Ready", "status": "False", "reason": "KubeletNotReady"}]
    node1 = apiserver.client("system:node:node1")
    assert node1.post("/api/v1/nodes", json=node).status_code == 201
    patch = {"status": {"$setElementOrder/conditions": [{"type": "MemoryPressure"}, {"type": "Ready"}],
                        "conditions": [{"type": "MemoryPressure", "status": "False"},
                                       {"type": "Ready", "status": "True", "reason": "KubeletReady"}],
                        "addresses": [{"type": "InternalIP", "address": "10.0.0.2"}],
                        "capacity": {"memory": "4194304Ki"}}}
    status = node1.patch("/api/v1/nodes/node1/status", json=patch, headers=SMP).json()["status"]
    assert [(c["type"], c["status"]) for c in status["conditions"]] == [("MemoryPressure", "False"), ("Ready", "True")]
    assert {a["type"]: a["address"] for a in status["addresses"]} == {"InternalIP": "10.0.0.2", "Hostname": "node1"}
    assert status["capacity"] == {"cpu": "2", "memory": "4Gi", "pods": "110"}  # canonical quantity


def test_json_patch(apiserver):
    _two_container_pod(apiserver)
    ops = [{"op": "add", "path": "/metadata/labels", "value": {"a": "b"}},
           {"op": "test", "path": "/spec/nodeName", "value": "node1"}]
    response = apiserver.admin.patch(POD, json=ops, headers={"Content-Type": "application/json-patch+json"})
    assert response.status_code == 200 and response.json()["metadata"]["labels"] == {"a": "b"}
    failing = [{"op": "test", "path": "/spec/nodeName", "value": "node2"}]
    assert apiserver.admin.patch(POD, json=failing, headers={"Content-Type": "application/json-patch+json"}).status_code == 422


def test_unsupported_patch_type_is_415(apiserver):
    _two_container_pod(apiserver)
    response = apiserver.admin.patch(POD, content=b"{}", headers={"Content-Type": "application/json"})
    assert response.status_code == 415
