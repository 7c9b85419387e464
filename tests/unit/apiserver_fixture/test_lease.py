"""Leases in kube-node-lease: create (409 AlreadyExists on a second create), get, and update
with optimistic concurrency (409 Conflict when metadata.resourceVersion is stale)."""

from __future__ import annotations

from tests.support.apiserver import objects

LEASES = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases"


def test_lease_create_get_and_already_exists(apiserver):
    node1 = apiserver.client("system:node:node1")
    created = node1.post(LEASES, json=objects.lease("node1", renew_time="2026-01-01T00:00:00.123456789Z"))
    assert created.status_code == 201, created.text
    assert created.json()["spec"]["renewTime"] == "2026-01-01T00:00:00.123456Z"  # MicroTime precision
    again = node1.post(LEASES, json=objects.lease("node1"))
    assert again.status_code == 409
    assert again.json()["reason"] == "AlreadyExists"
    assert again.json()["message"] == 'leases.coordination.k8s.io "node1" already exists'
    assert node1.get(f"{LEASES}/node1").json()["spec"]["holderIdentity"] == "node1"
    missing = node1.get(f"{LEASES}/node9")
    assert missing.status_code == 404 and missing.json()["details"] == {"name": "node9", "group": "coordination.k8s.io", "kind": "leases"}


def test_lease_update_with_a_stale_resource_version_is_409_conflict(apiserver):
    node1 = apiserver.client("system:node:node1")
    lease = node1.post(LEASES, json=objects.lease("node1")).json()
    lease["spec"]["renewTime"] = "2026-01-01T00:00:10.000000Z"
    renewed = node1.put(f"{LEASES}/node1", json=lease)
    assert renewed.status_code == 200, renewed.text
    assert int(renewed.json()["metadata"]["resourceVersion"]) > int(lease["metadata"]["resourceVersion"])
    lease["spec"]["renewTime"] = "2026-01-01T00:00:20.000000Z"  # still the old resourceVersion
    stale = node1.put(f"{LEASES}/node1", json=lease)
    assert stale.status_code == 409
    body = stale.json()
    assert body["reason"] == "Conflict"
    assert body["message"] == ('Operation cannot be fulfilled on leases.coordination.k8s.io "node1": the object has been '
                               "modified; please apply your changes to the latest version and try again")
    fresh = node1.get(f"{LEASES}/node1").json()
    fresh["spec"]["renewTime"] = "2026-01-01T00:00:20.000000Z"
    assert node1.put(f"{LEASES}/node1", json=fresh).status_code == 200


def test_lease_update_of_a_missing_lease_is_404(apiserver):
    node1 = apiserver.client("system:node:node1")
    assert node1.put(f"{LEASES}/node1", json=objects.lease("node1")).status_code == 404


def test_lease_with_zero_duration_is_invalid(apiserver):
    response = apiserver.client("system:node:node1").post(LEASES, json=objects.lease("node1", duration=0))
    assert response.status_code == 422
    assert response.json()["details"]["causes"][0]["field"] == "spec.leaseDurationSeconds"
