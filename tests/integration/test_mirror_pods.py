"""Mirror pods against the test API server, as the node identity system:node:node1 (Node
authorizer + NodeRestriction, schema validation): a static pod on the board gets a mirror
pod that the API accepts, recreated after an admin deletes it, deleted when the static pod
is gone; the status manager writes the static pod's status to it."""

from __future__ import annotations

from typing import Any

import trio

from pykubelet.actors.mirror_pods import mirror_pods_actor
from pykubelet.actors.pod_statuses import PodStatuses
from pykubelet.actors.status_manager import status_manager_actor
from pykubelet.messages.pod import PodCondition, PodStatus
from pykubelet.pods.manifest import decode_manifests
from pykubelet.supervisor import ChildSpec
from tests.integration.test_api_source import NODE, eventually, node_client
from tests.support.actors import running
from tests.support.apiserver import objects

MANIFEST = b"""
apiVersion: v1
kind: Pod
metadata: {name: etcd, namespace: kube-system, labels: {tier: control-plane}}
spec:
  hostNetwork: true
  containers:
  - {name: etcd, image: busybox:1.36, command: [sleep, "3600"]}
"""
MIRROR = "/api/v1/namespaces/kube-system/pods/etcd-node1"


def api_pod(apiserver, path: str = MIRROR) -> dict[str, Any]:
    answer = apiserver.admin.get(path)
    return answer.json() if answer.status_code == 200 else {}


async def test_a_static_pod_gets_a_mirror_pod_recreated_after_deletion_and_deleted_with_it(apiserver):
    server = apiserver
    node = server.admin.post("/api/v1/nodes", json=objects.node(NODE))
    assert node.status_code == 201, node.text
    node_uid = node.json()["metadata"]["uid"]
    (pod,) = decode_manifests(MANIFEST, origin="/etc/kubernetes/manifests/etcd.yaml", source="file", node_name=NODE)
    board = PodStatuses()
    board.set(pod, PodStatus(phase="Running", qos_class="BestEffort", conditions=[PodCondition(type="Ready", status="True")]))

    async with node_client(server) as client:
        mirrors = ChildSpec("mirror-pods", mirror_pods_actor(
            client=client, statuses=board, node_name=NODE, registered_node_uid=lambda: node_uid,
            desired=lambda: {p.metadata.uid for p in board.pods()},  # as the sync loop wants them
            period=0.5, poll=0.1,
        ))
        manager = ChildSpec("status-manager", status_manager_actor(client=client, statuses=board, period=0.5, poll=0.1))
        async with running(mirrors, manager):
            mirror = await eventually(lambda: api_pod(server), what="the mirror pod")
            meta = mirror["metadata"]
            assert meta["annotations"]["kubernetes.io/config.mirror"] == pod.metadata.annotations["kubernetes.io/config.hash"]
            assert meta["ownerReferences"] == [
                {"apiVersion": "v1", "kind": "Node", "name": NODE, "uid": node_uid, "controller": True}
            ]
            assert mirror["spec"]["nodeName"] == NODE and meta["labels"] == {"tier": "control-plane"}
            # Its status is the static pod's, written by the status manager.
            await eventually(lambda: api_pod(server).get("status", {}).get("phase") == "Running",
                             what="the static pod's status on its mirror pod")

            first_uid = meta["uid"]
            deleted = server.admin.request("DELETE", MIRROR, json={"gracePeriodSeconds": 0})
            assert deleted.status_code == 200, deleted.text
            again = await eventually(
                lambda: (p := api_pod(server)) and p["metadata"]["uid"] != first_uid and p, what="a new mirror pod",
            )
            await eventually(lambda: api_pod(server).get("status", {}).get("phase") == "Running",
                             what="the status on the new mirror pod")
            assert again["metadata"]["annotations"]["kubernetes.io/config.mirror"] == meta["annotations"]["kubernetes.io/config.mirror"]

            board.remove(pod.metadata.uid)
            await eventually(lambda: api_pod(server) == {}, what="the mirror pod to be deleted")
            await trio.sleep(1.0)
            assert api_pod(server) == {}  # and not created again
