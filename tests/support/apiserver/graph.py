"""The Node authorizer's graph (plugin/pkg/auth/authorizer/node/graph.go), read from the
store on each check instead of kept by informers: a node is related to the pods bound to
it and to the secrets, configmaps and service account those pods name. authz.py asks it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol

from tests.support.apiserver.defaults import MIRROR_ANNOTATION

_CONTAINER_KINDS = ("initContainers", "containers", "ephemeralContainers")
# Volume sources whose credentials are a secretRef (podutil.VisitPodSecretNames).
_SECRET_REF_VOLUMES = ("cephfs", "cinder", "flexVolume", "rbd", "scaleIO", "iscsi", "storageos")


class PodSource(Protocol):
    def list(self, resource: str, namespace: str | None = None) -> list[dict[str, Any]]: ...


def _containers(spec: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for kind in _CONTAINER_KINDS:
        yield from (c for c in spec.get(kind) or () if isinstance(c, dict))


def pod_secret_names(pod: dict[str, Any]) -> set[str]:
    """podutil.VisitPodSecretNames: image pull secrets, env and envFrom references, and the
    secret, projected and credential-carrying volume sources."""
    spec = pod.get("spec") or {}
    names = [ref.get("name") for ref in spec.get("imagePullSecrets") or ()]
    for container in _containers(spec):
        names += [((source.get("secretRef") or {}).get("name")) for source in container.get("envFrom") or ()]
        names += [((env.get("valueFrom") or {}).get("secretKeyRef") or {}).get("name") for env in container.get("env") or ()]
    for volume in spec.get("volumes") or ():
        names.append((volume.get("secret") or {}).get("secretName"))
        names.append((volume.get("azureFile") or {}).get("secretName"))
        names.append(((volume.get("csi") or {}).get("nodePublishSecretRef") or {}).get("name"))
        names += [((volume.get(kind) or {}).get("secretRef") or {}).get("name") for kind in _SECRET_REF_VOLUMES]
        names += [(source.get("secret") or {}).get("name") for source in (volume.get("projected") or {}).get("sources") or ()]
    return {name for name in names if name}


def pod_configmap_names(pod: dict[str, Any]) -> set[str]:
    """podutil.VisitPodConfigmapNames: env and envFrom references, configMap and projected volumes."""
    spec = pod.get("spec") or {}
    names = []
    for container in _containers(spec):
        names += [((source.get("configMapRef") or {}).get("name")) for source in container.get("envFrom") or ()]
        names += [((env.get("valueFrom") or {}).get("configMapKeyRef") or {}).get("name") for env in container.get("env") or ()]
    for volume in spec.get("volumes") or ():
        names.append((volume.get("configMap") or {}).get("name"))
        names += [(source.get("configMap") or {}).get("name") for source in (volume.get("projected") or {}).get("sources") or ()]
    return {name for name in names if name}


def pod_references(pod: dict[str, Any]) -> set[tuple[str, str]]:
    """(resource, name) of every object Graph.AddPod links to a bound pod. A mirror pod
    links to nothing: a node must not gain access by creating one."""
    meta = pod.get("metadata") or {}
    if MIRROR_ANNOTATION in (meta.get("annotations") or {}):
        return set()
    refs = {("secrets", name) for name in pod_secret_names(pod)}
    refs |= {("configmaps", name) for name in pod_configmap_names(pod)}
    if account := (pod.get("spec") or {}).get("serviceAccountName"):
        refs.add(("serviceaccounts", account))
    return refs


class NodeGraph:
    """hasPathFrom over the store: is the object reachable from a pod bound to the node?"""

    def __init__(self, pods: PodSource) -> None:
        self._pods = pods

    def pods_on(self, node: str, namespace: str | None = None) -> list[dict[str, Any]]:
        return [p for p in self._pods.list("pods", namespace) if (p.get("spec") or {}).get("nodeName") == node]

    def related(self, node: str, resource: str, namespace: str, name: str) -> bool:
        if resource == "pods":
            return any((p.get("metadata") or {}).get("name") == name for p in self.pods_on(node, namespace))
        return any((resource, name) in pod_references(p) for p in self.pods_on(node, namespace))
