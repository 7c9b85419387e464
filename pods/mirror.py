"""Mirror pods (Go: pkg/kubelet/pod/mirror_client.go and syncPod's mirror handling): what
to create and delete in the API so that each static pod of this node has exactly one
mirror pod, built from the static pod and owned by the Node. Pure: no I/O.

Pods are matched by full name (namespace/name), as the Go kubelet does. A mirror pod
belongs to the static pod whose config.hash its config.mirror annotation carries; any
other (an edited manifest, a pod being deleted) is deleted and created again.
"""

from __future__ import annotations

from collections.abc import Mapping, Set
from dataclasses import dataclass
from typing import Any

import msgspec

from pykubelet.messages.pod import Pod
from pykubelet.pods.manifest import CONFIG_HASH, CONFIG_MIRROR, CONFIG_SOURCE

API_SOURCE = "api"


@dataclass(frozen=True)
class MirrorNode:
    """The Node that owns this kubelet's mirror pods."""

    name: str
    uid: str


@dataclass(frozen=True)
class CreateMirrorPod:
    namespace: str
    name: str
    body: dict[str, Any]
    pod_uid: str  # the static pod's UID (on the board), whose status the mirror pod will carry


@dataclass(frozen=True)
class DeleteMirrorPod:
    namespace: str
    name: str
    uid: str  # the precondition: never delete a pod that took the name since we looked
    reason: str


MirrorAction = CreateMirrorPod | DeleteMirrorPod


def is_static_pod(pod: Pod) -> bool:
    """Go's kubetypes.IsStaticPod: a pod from a source other than the API server."""
    return pod.metadata.annotations.get(CONFIG_SOURCE, API_SOURCE) != API_SOURCE


def is_mirror_pod(obj: Mapping[str, Any]) -> bool:
    """Go's kubetypes.IsMirrorPod, on an API object."""
    return CONFIG_MIRROR in (((obj.get("metadata") or {}).get("annotations")) or {})


def full_name(namespace: str, name: str) -> str:
    return f"{namespace}/{name}"


def mirror_pod_body(pod: Pod, node: MirrorNode) -> dict[str, Any]:
    """Go's CreateMirrorPod: the static pod as the API should hold it, its config.hash as
    config.mirror, an owner reference to the Node; no identity or status of its own."""
    meta = pod.metadata
    annotations = {**meta.annotations, CONFIG_MIRROR: meta.annotations.get(CONFIG_HASH, meta.uid)}
    body = msgspec.to_builtins(pod)
    body.pop("status", None)
    body["metadata"] = {
        k: v for k, v in {
            "name": meta.name,
            "namespace": meta.namespace,
            "labels": dict(meta.labels),
            "annotations": annotations,
            "ownerReferences": [
                {"apiVersion": "v1", "kind": "Node", "name": node.name, "uid": node.uid, "controller": True}
            ],
        }.items() if v
    }
    body.setdefault("spec", {})["nodeName"] = node.name
    return body


def mirror_actions(
    static_pods: Mapping[str, Pod],
    mirror_pods: Mapping[str, Mapping[str, Any]],
    node: MirrorNode | None,
    desired_uids: Set[str] | None = frozenset(),
) -> list[MirrorAction]:
    """The creates and deletes that give each static pod one mirror pod of its own.

    static_pods: the static pods this kubelet runs, by full name; a name given as None is
    in transition (two static pods share it while the old one terminates) and left alone.
    mirror_pods: the API's mirror pods bound to this node, by full name.
    node: None while the Node's UID is unknown; then nothing is created (Go: no owner
    reference, no mirror pod), but orphans are still deleted.
    desired_uids: the pods the sync loop wants, None until every source has been seen. A
    mirror pod is an orphan only once they are known and its static pod (the UID its
    config.mirror annotation names) is not among them: a restarted kubelet's board fills
    up pod by pod, and a mirror pod of a static pod not on it yet is not deleted then
    (Go deletes orphans only in housekeeping, after all sources are ready).
    Deletes come first, so that a recreate is a delete followed by a create.
    """
    deletes: list[MirrorAction] = []
    creates: list[MirrorAction] = []
    for key, mirror in sorted(mirror_pods.items()):
        meta = mirror.get("metadata") or {}
        namespace, name, uid = meta.get("namespace", ""), meta.get("name", ""), meta.get("uid", "")
        if key not in static_pods:
            wanted = (meta.get("annotations") or {}).get(CONFIG_MIRROR)
            if desired_uids is not None and wanted not in desired_uids:
                deletes.append(DeleteMirrorPod(namespace, name, uid, "its static pod is gone"))
            continue
        pod = static_pods[key]
        if pod is None:
            continue
        if meta.get("deletionTimestamp"):
            deletes.append(DeleteMirrorPod(namespace, name, uid, "it is being deleted"))
        elif (meta.get("annotations") or {}).get(CONFIG_MIRROR) != pod.metadata.annotations.get(CONFIG_HASH):
            deletes.append(DeleteMirrorPod(namespace, name, uid, "its static pod changed"))
    deleted = {full_name(a.namespace, a.name) for a in deletes}
    if node is not None:
        for key, pod in sorted(static_pods.items()):
            if pod is not None and (key not in mirror_pods or key in deleted):
                body = mirror_pod_body(pod, node)
                creates.append(CreateMirrorPod(pod.metadata.namespace, pod.metadata.name, body, pod.metadata.uid))
    return deletes + creates


def static_pods_by_full_name(pods: list[Pod]) -> dict[str, Pod | None]:
    """The static pods among `pods` (the PodStatuses board), by full name; None for a name
    two of them share (an edited manifest whose old pod is still terminating)."""
    found: dict[str, Pod | None] = {}
    for pod in pods:
        if not is_static_pod(pod):
            continue
        key = full_name(pod.metadata.namespace, pod.metadata.name)
        found[key] = None if key in found else pod
    return found


def mirror_pods_by_full_name(items: list[Mapping[str, Any]], node_name: str) -> dict[str, Mapping[str, Any]]:
    """The mirror pods bound to node_name among listed pods, by full name."""
    found: dict[str, Mapping[str, Any]] = {}
    for obj in items:
        meta = obj.get("metadata") or {}
        if is_mirror_pod(obj) and (obj.get("spec") or {}).get("nodeName") == node_name:
            found[full_name(meta.get("namespace", ""), meta.get("name", ""))] = obj
    return found
