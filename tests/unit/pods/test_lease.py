"""The node Lease: what it holds, how it is renewed, how often (its back-off is tested with
the actor, tests/unit/actors/test_node_lease.py)."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from pykubelet.pods.lease import (
    lease_path,
    leases_path,
    micro_time,
    new_lease,
    renew_interval,
    renewed_lease,
)

NOW = datetime(2026, 11, 22, 22, 7, 6, 123456, tzinfo=timezone.utc).timestamp()
OWNER = {"apiVersion": "v1", "kind": "Node", "name": "node-a", "uid": "u-1"}


@pytest.mark.parametrize(
    "seconds, text",
    [
        (NOW, "2026-11-22T22:07:06.123456Z"),
        (0.0, "1970-01-01T00:00:00.000000Z"),
    ],
)
def test_micro_time_is_rfc3339_with_microseconds(seconds, text):
    assert micro_time(seconds) == text


@pytest.mark.parametrize("duration, interval", [(40, 10.0), (60, 15.0), (10, 2.5)])
def test_renewed_every_quarter_of_the_duration(duration, interval):
    assert renew_interval(duration) == interval


def test_paths():
    assert leases_path() == "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases"
    assert lease_path("node-a") == "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/node-a"


def test_new_lease_is_held_by_the_node_and_owned_by_it():
    assert new_lease("node-a", now=NOW, node_uid="u-1") == {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": "node-a", "namespace": "kube-node-lease", "ownerReferences": [OWNER]},
        "spec": {"holderIdentity": "node-a", "leaseDurationSeconds": 40,
                 "renewTime": "2026-11-22T22:07:06.123456Z"},
    }  # fmt: skip


@pytest.mark.parametrize(
    "metadata, uid, owners",
    [
        ({"name": "node-a", "resourceVersion": "7", "ownerReferences": [OWNER]}, "u-1", [OWNER]),
        ({"name": "node-a", "resourceVersion": "7"}, "u-1", [OWNER]),  # added once the uid is known
        ({"name": "node-a", "resourceVersion": "7"}, None, None),
    ],
)
def test_renewal_moves_renew_time_only_and_adds_a_missing_owner(metadata, uid, owners):
    base = {"metadata": metadata,
            "spec": {"holderIdentity": "node-a", "leaseDurationSeconds": 40, "renewTime": "old", "leaseTransitions": 2}}
    lease = renewed_lease(base, now=NOW, node_name="node-a", node_uid=uid)
    assert lease["spec"] == {**base["spec"], "renewTime": "2026-11-22T22:07:06.123456Z"}
    assert lease["metadata"]["resourceVersion"] == "7"
    assert lease["metadata"].get("ownerReferences") == owners
    assert base["spec"]["renewTime"] == "old"  # a copy
