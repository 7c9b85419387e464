"""Mirror pod decisions (pods/mirror.py), as tables: each static pod gets one mirror pod
owned by the Node; a deleted one is created again, one of an older manifest or being
deleted is replaced, one whose static pod is gone (once every source was seen) is deleted; nothing is created while the
Node's UID is unknown or while two static pods share a name."""

from __future__ import annotations

from typing import Any

import pytest

from pykubelet.messages.pod import Container, ObjectMeta, Pod, PodSpec, PodStatus
from pykubelet.pods.mirror import (
    CreateMirrorPod,
    DeleteMirrorPod,
    MirrorNode,
    is_static_pod,
    mirror_actions,
    mirror_pod_body,
    mirror_pods_by_full_name,
    static_pods_by_full_name,
)

NODE = MirrorNode("node1", "node-uid")


def static(name: str, hash_: str, *, source: str = "file") -> Pod:
    return Pod(
        metadata=ObjectMeta(name=name, namespace="kube-system", uid=hash_, labels={"tier": "control-plane"},
                            annotations={"kubernetes.io/config.hash": hash_, "kubernetes.io/config.source": source,
                                         "kubernetes.io/config.seen": "2026-01-01T00:00:00Z"}),
        spec=PodSpec(node_name="node1", host_network=True, containers=[Container(name="c", image="busybox")]),
        status=PodStatus(phase="Running"),
    )


def mirror(name: str, hash_: str, *, uid: str = "", deleting: bool = False, node: str = "node1") -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "kube-system", "uid": uid or f"m-{name}",
                            "annotations": {"kubernetes.io/config.mirror": hash_}}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": meta, "spec": {"nodeName": node}}


def keyed(*items: Any) -> dict[str, Any]:
    return {f"kube-system/{(i.metadata.name if isinstance(i, Pod) else i['metadata']['name'])}": i for i in items}


def kinds(actions: list) -> list[tuple[str, str]]:
    return [("create" if isinstance(a, CreateMirrorPod) else "delete", a.name) for a in actions]


@pytest.mark.parametrize(
    ("statics", "mirrors", "node", "expected"),
    [
        pytest.param([static("etcd", "h1")], [], NODE, [("create", "etcd")], id="missing mirror is created"),
        pytest.param([static("etcd", "h1")], [mirror("etcd", "h1")], NODE, [], id="matching mirror is left alone"),
        pytest.param([static("etcd", "h2")], [mirror("etcd", "h1")], NODE,
                     [("delete", "etcd"), ("create", "etcd")], id="mirror of an older manifest is recreated"),
        pytest.param([static("etcd", "h1")], [mirror("etcd", "h1", deleting=True)], NODE,
                     [("delete", "etcd"), ("create", "etcd")], id="mirror being deleted is recreated"),
        pytest.param([], [mirror("etcd", "h1")], NODE, [("delete", "etcd")], id="orphaned mirror is deleted"),
        pytest.param([static("etcd", "h1")], [], None, [], id="no node uid yet: nothing created"),
        pytest.param([], [mirror("etcd", "h1")], None, [("delete", "etcd")], id="no node uid yet: orphans still go"),
        pytest.param([static("a", "h1"), static("b", "h2")], [mirror("b", "h2"), mirror("c", "h3")], NODE,
                     [("delete", "c"), ("create", "a")], id="several pods: deletes first"),
    ],
)
def test_mirror_actions(statics, mirrors, node, expected):
    assert kinds(mirror_actions(keyed(*statics), keyed(*mirrors), node)) == expected


@pytest.mark.parametrize(("desired", "expected"), [
    pytest.param(None, [], id="sources not all seen: no orphan yet"),
    pytest.param({"h1"}, [], id="wanted, not on the board yet: kept"),
    pytest.param({"other"}, [("delete", "etcd")], id="not wanted: deleted"),
])  # fmt: skip
def test_a_mirror_pod_is_an_orphan_only_when_its_static_pod_is_not_wanted(desired, expected):
    assert kinds(mirror_actions({}, keyed(mirror("etcd", "h1")), NODE, desired)) == expected


def test_a_name_two_static_pods_share_is_left_alone_until_the_old_one_is_gone():
    board = static_pods_by_full_name([static("etcd", "h1"), static("etcd", "h2")])
    assert board == {"kube-system/etcd": None}
    assert mirror_actions(board, keyed(mirror("etcd", "h1")), NODE) == []
    assert mirror_actions(board, {}, NODE) == []


def test_the_delete_carries_the_mirror_pods_uid_as_precondition():
    (action,) = mirror_actions({}, keyed(mirror("etcd", "h1", uid="u-7")), NODE)
    assert action == DeleteMirrorPod("kube-system", "etcd", "u-7", "its static pod is gone")


def test_the_mirror_pod_is_the_static_pod_with_the_mirror_annotation_and_the_node_as_owner():
    body = mirror_pod_body(static("etcd", "h1"), NODE)
    meta = body["metadata"]
    assert meta["name"] == "etcd" and meta["namespace"] == "kube-system" and meta["labels"] == {"tier": "control-plane"}
    assert meta["annotations"]["kubernetes.io/config.mirror"] == "h1"
    assert meta["annotations"]["kubernetes.io/config.hash"] == "h1"
    assert meta["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Node", "name": "node1", "uid": "node-uid", "controller": True}
    ]
    assert "uid" not in meta and "status" not in body
    assert body["spec"]["nodeName"] == "node1" and body["spec"]["hostNetwork"] is True
    assert body["spec"]["containers"][0]["name"] == "c"


def test_only_static_pods_and_only_this_nodes_mirror_pods_count():
    assert is_static_pod(static("etcd", "h1")) and not is_static_pod(static("web", "h1", source="api"))
    assert list(static_pods_by_full_name([static("etcd", "h1"), static("web", "h2", source="api")])) == [
        "kube-system/etcd"
    ]
    plain = {"metadata": {"name": "web", "namespace": "kube-system"}, "spec": {"nodeName": "node1"}}
    listed = [mirror("etcd", "h1"), mirror("other", "h1", node="node2"), plain]
    assert list(mirror_pods_by_full_name(listed, "node1")) == ["kube-system/etcd"]
