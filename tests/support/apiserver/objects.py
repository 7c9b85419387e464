"""Small builders of API objects for tests, and a reader for watch streams."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx

MIRROR_ANNOTATION = "kubernetes.io/config.mirror"


def pod(name: str, node: str | None = "node1", *, namespace: str = "default", image: str = "busybox:1.36",
        command: list[str] | None = None, **spec: Any) -> dict[str, Any]:
    """A minimal valid Pod bound to `node` (None: unbound)."""
    container: dict[str, Any] = {"name": "main", "image": image}
    if command is not None:
        container["command"] = command
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"containers": [container], **spec},
    }
    if node is not None:
        body["spec"]["nodeName"] = node
    return body


def mirror_pod(name: str, node: str, *, namespace: str = "default", hash_: str = "0123456789abcdef") -> dict[str, Any]:
    body = pod(name, node, namespace=namespace)
    body["metadata"]["annotations"] = {MIRROR_ANNOTATION: hash_, "kubernetes.io/config.source": "file",
                                       "kubernetes.io/config.hash": hash_}
    body["metadata"]["ownerReferences"] = [{"apiVersion": "v1", "kind": "Node", "name": node, "uid": "00000000-0000-0000-0000-000000000001", "controller": True}]
    return body


def node(name: str, *, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
        "status": {"capacity": {"cpu": "2", "memory": "4Gi", "pods": "110"}},
    }


def lease(name: str, *, holder: str | None = None, duration: int = 40, renew_time: str = "2026-01-01T00:00:00.000000Z") -> dict[str, Any]:
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": name, "namespace": "kube-node-lease"},
        "spec": {"holderIdentity": holder or name, "leaseDurationSeconds": duration, "renewTime": renew_time},
    }


def event(name: str, *, namespace: str = "default", involved: dict[str, Any] | None = None, reason: str = "Started") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": name, "namespace": namespace},
        "involvedObject": involved or {"kind": "Pod", "namespace": namespace, "name": "p", "apiVersion": "v1"},
        "reason": reason,
        "message": "started container",
        "type": "Normal",
        "source": {"component": "kubelet", "host": "node1"},
        "count": 1,
    }


def watch_events(response: httpx.Response) -> Iterator[dict[str, Any]]:
    """The events of a streamed watch response (client.stream("GET", ..., params={"watch": "1"}))."""
    for line in response.iter_lines():
        if line.strip():
            yield json.loads(line)


def take(events: Iterator[dict[str, Any]], count: int) -> list[dict[str, Any]]:
    return [next(events) for _ in range(count)]
