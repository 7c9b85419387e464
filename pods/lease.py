"""The node Lease in kube-node-lease: the kubelet's cheap heartbeat (Go: pkg/kubelet/nodelease
and component-helpers' lease controller). What the Lease object holds, how it is renewed,
how often, and the bounds of the back-off while the API server fails.

Pure: actors/node_lease.py does the GET, POST and PUT.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any

NAMESPACE = "kube-node-lease"
RENEW_INTERVAL_FRACTION = 0.25  # Go: NodeLeaseRenewIntervalFraction
DEFAULT_DURATION = 40  # seconds; KubeletConfiguration nodeLeaseDurationSeconds
MAX_UPDATE_RETRIES = 5  # Go: maxUpdateRetries, immediate tries per renewal
# The waits between failed attempts to get or create the Lease (pods/backoff.py's
# ExponentialBackoff, no jitter, as Go's backoffEnsureLease).
BACKOFF_INITIAL = 0.2  # Go starts at 100ms and doubles before the first sleep
BACKOFF_MAX = 7.0  # Go: maxBackoff


def leases_path(namespace: str = NAMESPACE) -> str:
    return f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"


def lease_path(node_name: str, namespace: str = NAMESPACE) -> str:
    return f"{leases_path(namespace)}/{node_name}"


def renew_interval(duration_seconds: float) -> float:
    """How often the lease is renewed: a quarter of its duration (10 s for 40 s)."""
    return duration_seconds * RENEW_INTERVAL_FRACTION


def micro_time(seconds: float) -> str:
    """Unix seconds as a metav1.MicroTime: "2026-11-22T22:07:06.123456Z"."""
    return datetime.fromtimestamp(seconds, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def owner_reference(node_name: str, node_uid: str) -> dict[str, str]:
    """The Lease belongs to its Node, so that deleting the Node deletes the Lease."""
    return {"apiVersion": "v1", "kind": "Node", "name": node_name, "uid": node_uid}


def new_lease(
    node_name: str, *, now: float, node_uid: str, duration: int = DEFAULT_DURATION, namespace: str = NAMESPACE
) -> dict[str, Any]:
    """The Lease to create: held by the node, renewed now, owned by the Node (Go creates it
    only once the Node's uid is known, so it is never without its owner reference)."""
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {
            "name": node_name,
            "namespace": namespace,
            "ownerReferences": [owner_reference(node_name, node_uid)],
        },
        "spec": {
            "holderIdentity": node_name,
            "leaseDurationSeconds": duration,
            "renewTime": micro_time(now),
        },
    }


def renewed_lease(base: Mapping[str, Any], *, now: float, node_name: str, node_uid: str | None) -> dict[str, Any]:
    """A copy of the last Lease seen (its resourceVersion included, for optimistic
    concurrency) with a new renewTime, and the owner reference added if it lacks one and
    the Node's uid is known. Nothing else changes: another holder's fields stay."""
    lease = copy.deepcopy(dict(base))
    lease.setdefault("spec", {})["renewTime"] = micro_time(now)
    metadata = lease.setdefault("metadata", {})
    if not metadata.get("ownerReferences") and node_uid:
        metadata["ownerReferences"] = [owner_reference(node_name, node_uid)]
    return lease


