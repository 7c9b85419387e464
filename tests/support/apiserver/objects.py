"""Small builders of API objects for tests, a reader for watch streams, and a decoder for
the service account tokens the server issues."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable, Iterator
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


def configmap(name: str, data: dict[str, str] | None = None, namespace: str = "default", *,
              binary_data: dict[str, bytes] | None = None, immutable: bool | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": namespace}}
    if data is not None:
        body["data"] = dict(data)
    if binary_data is not None:
        body["binaryData"] = {k: base64.b64encode(v).decode() for k, v in binary_data.items()}
    if immutable is not None:
        body["immutable"] = immutable
    return body


def secret(name: str, data: dict[str, bytes] | None = None, namespace: str = "default", *,
           type_: str = "Opaque", immutable: bool | None = None) -> dict[str, Any]:
    """A Secret; `data` values are raw bytes, sent base64-encoded as the API wants them."""
    body: dict[str, Any] = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": namespace},
                            "type": type_}
    if data is not None:
        body["data"] = {k: base64.b64encode(v).decode() for k, v in data.items()}
    if immutable is not None:
        body["immutable"] = immutable
    return body


def service(name: str, cluster_ip: str | None = None, ports: Iterable[int | dict[str, Any]] = (80,),
            namespace: str = "default", *, selector: dict[str, str] | None = None, type_: str = "ClusterIP") -> dict[str, Any]:
    """A Service; cluster_ip None lets the server allocate one from 10.96.0.0/24. A port is
    a number (TCP, target the same port; named port-<n> when there are several) or a
    ServicePort dict."""
    ports = list(ports)
    spec_ports = [p if isinstance(p, dict) else ({"name": f"port-{p}"} if len(ports) > 1 else {}) | {"port": p}
                  for p in ports]
    spec: dict[str, Any] = {"type": type_, "ports": spec_ports}
    if cluster_ip is not None:
        spec["clusterIP"] = cluster_ip
    if selector is not None:
        spec["selector"] = dict(selector)
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": namespace}, "spec": spec}


def serviceaccount(name: str, namespace: str = "default", *, automount: bool | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name, "namespace": namespace}}
    if automount is not None:
        body["automountServiceAccountToken"] = automount
    return body


def token_request(pod: dict[str, Any] | None = None, *, audiences: list[str] | None = None,
                  expiration_seconds: int | None = None, pod_name: str | None = None,
                  pod_uid: str | None = None) -> dict[str, Any]:
    """An authentication.k8s.io/v1 TokenRequest as a kubelet sends it, bound to `pod` (a
    stored Pod: its name and uid) unless pod_name/pod_uid say otherwise; pod None and no
    pod_name: unbound."""
    spec: dict[str, Any] = {}
    if audiences is not None:
        spec["audiences"] = list(audiences)
    if expiration_seconds is not None:
        spec["expirationSeconds"] = expiration_seconds
    meta = (pod or {}).get("metadata") or {}
    name, uid = pod_name or meta.get("name"), pod_uid or meta.get("uid")
    if name:
        spec["boundObjectRef"] = {"kind": "Pod", "apiVersion": "v1", "name": name, **({"uid": uid} if uid else {})}
    return {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec}


def token_claims(token: str) -> dict[str, Any]:
    """The claims of an issued service account token (a JWT), signature not checked."""
    payload = token.split(".")[1]
    return json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))


def watch_events(response: httpx.Response) -> Iterator[dict[str, Any]]:
    """The events of a streamed watch response (client.stream("GET", ..., params={"watch": "1"}))."""
    for line in response.iter_lines():
        if line.strip():
            yield json.loads(line)


def take(events: Iterator[dict[str, Any]], count: int) -> list[dict[str, Any]]:
    return [next(events) for _ in range(count)]
