"""A node identity (system:node:<name> in system:nodes) gets what the Node authorizer and
NodeRestriction give it on a real v1.36 kube-apiserver, and 403 for the rest."""

from __future__ import annotations

import pytest

from tests.support.apiserver import objects
from tests.unit.apiserver_fixture.helpers import forbidden_message

NODE = "system:node:node1"





def test_listing_nodes_needs_a_selector_on_its_own_name(apiserver, node1):
    message = forbidden_message(node1.get("/api/v1/nodes"))
    assert message.startswith('nodes is forbidden: User "system:node:node1" cannot list resource "nodes"')
    assert node1.get("/api/v1/nodes", params={"fieldSelector": "metadata.name=node1"}).status_code == 200
    forbidden_message(node1.get("/api/v1/nodes", params={"fieldSelector": "metadata.name=node2"}))
    forbidden_message(node1.get("/api/v1/nodes/node2"))


def test_listing_and_watching_pods_needs_a_selector_on_its_node_name(apiserver, node1):
    forbidden_message(node1.get("/api/v1/pods"))
    forbidden_message(node1.get("/api/v1/namespaces/default/pods"))
    forbidden_message(node1.get("/api/v1/pods", params={"fieldSelector": "spec.nodeName=node2"}))
    forbidden_message(node1.get("/api/v1/pods", params={"watch": "1"}))
    listed = node1.get("/api/v1/pods", params={"fieldSelector": "spec.nodeName=node1"})
    assert listed.status_code == 200 and listed.json()["kind"] == "PodList"


def test_node_writes_only_its_own_node(apiserver, node1):
    assert node1.post("/api/v1/nodes", json=objects.node("node1")).status_code == 201
    message = forbidden_message(node1.post("/api/v1/nodes", json=objects.node("node2")))
    assert 'node "node1" is not allowed to modify node "node2"' in message
    apiserver.admin.post("/api/v1/nodes", json=objects.node("node2"))
    forbidden_message(node1.patch("/api/v1/nodes/node2/status", json={"status": {"phase": "Running"}},
                           headers={"Content-Type": "application/strategic-merge-patch+json"}))
    patched = node1.patch("/api/v1/nodes/node1/status",
                          json={"status": {"conditions": [{"type": "Ready", "status": "True"}]}},
                          headers={"Content-Type": "application/strategic-merge-patch+json"})
    assert patched.status_code == 200


@pytest.mark.parametrize("label", ["node-restriction.kubernetes.io/pool", "node-role.kubernetes.io/worker",
                                   "sub.node-restriction.kubernetes.io/x"])
def test_node_may_not_set_restricted_labels(apiserver, node1, label):
    message = forbidden_message(node1.post("/api/v1/nodes", json=objects.node("node1", labels={label: "x"})))
    assert f"is not allowed to set the following labels: {label}" in message
    assert node1.post("/api/v1/nodes", json=objects.node("node1", labels={"example.com/ok": "x"})).status_code == 201
    forbidden_message(node1.patch("/api/v1/nodes/node1", json={"metadata": {"labels": {label: "x"}}},
                           headers={"Content-Type": "application/merge-patch+json"}))


def test_node_writes_only_its_own_lease_in_kube_node_lease(apiserver, node1):
    base = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases"
    assert node1.post(base, json=objects.lease("node1")).status_code == 201
    message = forbidden_message(node1.post(base, json=objects.lease("node2")))
    assert "can only access node lease with the same name as the requesting node" in message
    other_ns = objects.lease("node1")
    other_ns["metadata"]["namespace"] = "default"
    forbidden_message(node1.post("/apis/coordination.k8s.io/v1/namespaces/default/leases", json=other_ns))
    forbidden_message(node1.get(base))  # no list of leases


def test_node_creates_only_mirror_pods_bound_to_itself(apiserver, node1):
    pods = "/api/v1/namespaces/default/pods"
    message = forbidden_message(node1.post(pods, json=objects.pod("plain", "node1")))
    assert 'can only create mirror pods' in message
    message = forbidden_message(node1.post(pods, json=objects.mirror_pod("elsewhere", "node2")))
    assert "can only create pods with spec.nodeName set to itself" in message
    created = node1.post(pods, json=objects.mirror_pod("static-web-node1", "node1"))
    assert created.status_code == 201, created.text
    assert "serviceAccountName" not in created.json()["spec"]


def test_node_reads_deletes_and_reports_status_only_for_pods_bound_to_it(apiserver, node1):
    admin = apiserver.admin
    for name, node in (("mine", "node1"), ("theirs", "node2")):
        assert admin.post("/api/v1/namespaces/default/pods", json=objects.pod(name, node)).status_code == 201
    merge = {"Content-Type": "application/merge-patch+json"}
    status = {"status": {"phase": "Running"}}
    assert node1.get("/api/v1/namespaces/default/pods/mine").status_code == 200
    assert "no relationship found" in forbidden_message(node1.get("/api/v1/namespaces/default/pods/theirs"))
    assert node1.patch("/api/v1/namespaces/default/pods/mine/status", json=status, headers=merge).status_code == 200
    message = forbidden_message(node1.patch("/api/v1/namespaces/default/pods/theirs/status", json=status, headers=merge))
    assert "can only update pod status for pods with spec.nodeName set to itself" in message
    forbidden_message(node1.patch("/api/v1/namespaces/default/pods/mine", json={"metadata": {"labels": {"a": "b"}}}, headers=merge))
    message = forbidden_message(node1.delete("/api/v1/namespaces/default/pods/theirs"))
    assert "can only delete pods with spec.nodeName set to itself" in message
    assert node1.delete("/api/v1/namespaces/default/pods/mine").status_code == 200


def test_node_creates_and_patches_events(apiserver, node1):
    created = node1.post("/api/v1/namespaces/default/events", json=objects.event("p.17a"))
    assert created.status_code == 201, created.text
    patched = node1.patch("/api/v1/namespaces/default/events/p.17a", json={"count": 2},
                          headers={"Content-Type": "application/strategic-merge-patch+json"})
    assert patched.status_code == 200 and patched.json()["count"] == 2
    forbidden_message(node1.get("/api/v1/namespaces/default/events"))


def test_other_identities_have_no_grants(apiserver):
    alice = apiserver.client("alice")
    assert forbidden_message(alice.get("/api/v1/namespaces/default/pods")).startswith(
        'pods is forbidden: User "alice" cannot list resource "pods" in API group "" in the namespace "default"')
