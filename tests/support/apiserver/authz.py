"""Who may do what: x509 and bearer-token authentication, then authorization as a cluster
with the Node authorizer (with selectors, as v1.36 ships it; its graph in graph.py) plus
NodeRestriction admission sees it. system:masters may do anything; node identities get the
Node authorizer's rules; any other identity has no RBAC grants here and gets 403 for every
resource request."""

from __future__ import annotations

import datetime
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tests.support.apiserver import errors
from tests.support.apiserver.defaults import MIRROR_ANNOTATION
from tests.support.apiserver.graph import NodeGraph
from tests.support.apiserver.pki import MASTERS_GROUP, NODE_USER_PREFIX, NODES_GROUP, CertificateAuthority, Identity, client_identity
from tests.support.apiserver.selectors import FieldRequirement

NODE_LEASE_NAMESPACE = "kube-node-lease"
FORBIDDEN_NODE_LABEL_NAMESPACES = ("node-restriction.kubernetes.io", "node-role.kubernetes.io")
# bootstrappolicy.NodeRules, which the Node authorizer applies to node identities.
REVIEWS_A_NODE_MAY_CREATE = frozenset({
    ("authentication.k8s.io", "tokenreviews"),
    ("authorization.k8s.io", "subjectaccessreviews"),
    ("authorization.k8s.io", "localsubjectaccessreviews"),
})


@dataclass(frozen=True)
class RequestInfo:
    """The resource request as kube-apiserver's RequestInfoResolver reads a URL."""

    verb: str  # get list watch create update patch delete deletecollection
    group: str
    version: str
    resource: str  # "pods"
    subresource: str  # "" or "status" or "binding"
    namespace: str
    name: str

    @property
    def resource_path(self) -> str:
        return f"{self.resource}/{self.subresource}" if self.subresource else self.resource


def authenticate(
    peer_cert_der: bytes | None,
    authorization_header: str | None,
    ca: CertificateAuthority,
    tokens: dict[str, Identity],
) -> Identity | None:
    """The request's identity, or None (401). A certificate is checked here rather than in the
    TLS handshake so that a bad one answers 401 as the real server does."""
    if peer_cert_der:
        if not ca.signed(peer_cert_der):
            return None
        identity, not_before, not_after = client_identity(peer_cert_der)
        now = datetime.datetime.now(datetime.timezone.utc)
        if not (not_before <= now <= not_after) or not identity.user:
            return None
        return identity
    if authorization_header and authorization_header.lower().startswith("bearer "):
        return tokens.get(authorization_header[7:].strip())
    return None


def node_name_of(identity: Identity) -> str | None:
    if NODES_GROUP in identity.groups and identity.user.startswith(NODE_USER_PREFIX):
        return identity.user[len(NODE_USER_PREFIX):]
    return None


def _denied(identity: Identity, ri: RequestInfo, reason: str, name: str = "") -> errors.ApiError:
    scope = f'in the namespace "{ri.namespace}"' if ri.namespace else "at the cluster scope"
    why = (f'User "{identity.user}" cannot {ri.verb} resource "{ri.resource_path}" in API group "{ri.group}" '
           f"{scope}" + (f": {reason}" if reason else ""))
    return errors.forbidden(ri.resource, ri.group, name or ri.name or None, why)


def _selects(requirements: list[FieldRequirement], field: str, value: str) -> bool:
    return any(r.field == field and r.op == "=" and r.value == value for r in requirements)


def request_name(ri: RequestInfo, field_selector: list[FieldRequirement]) -> str:
    """The name the RequestInfoResolver gives a request: a list or watch with an exact
    metadata.name field selector names that one object (so the authorizer can allow it)."""
    if ri.name or ri.verb not in ("list", "watch"):
        return ri.name
    for requirement in field_selector:
        if requirement.field == "metadata.name" and requirement.op == "=":
            value = requirement.value
            return "" if value in (".", "..") or "/" in value or "%" in value else value
    return ""


def authorize(identity: Identity, ri: RequestInfo, field_selector: list[FieldRequirement],
              stored_pod: dict[str, Any] | None, graph: NodeGraph | None = None) -> None:
    """Raise 403 unless the identity may make this request (before admission). `graph`
    answers whether an object is related to a node (Node authorizer); without one, nothing
    is related."""
    if MASTERS_GROUP in identity.groups:
        return
    node = node_name_of(identity)
    if node is None:
        if NODES_GROUP in identity.groups:
            raise _denied(identity, ri, "unknown node for user")
        raise _denied(identity, ri, "")
    name = request_name(ri, field_selector)

    def related(resource: str) -> None:  # NodeAuthorizer.authorize: a path from the object to the node
        if not name:
            raise _denied(identity, ri, "No Object name found")
        if graph is None or not graph.related(node, resource, ri.namespace, name):
            raise _denied(identity, ri, f"no relationship found between node '{node}' and this object", name)

    resource, verb = ri.resource_path, ri.verb
    if ri.group == "" and ri.resource in ("secrets", "configmaps"):  # authorizeReadNamespacedObject
        if verb not in ("get", "list", "watch"):
            raise _denied(identity, ri, "can only read resources of this type")
        if ri.subresource:
            raise _denied(identity, ri, "cannot read subresource")
        if not ri.namespace:
            raise _denied(identity, ri, "can only read namespaced object of this type", name)
        return related(ri.resource)
    if ri.group == "" and ri.resource == "serviceaccounts":  # authorizeServiceAccount
        if verb == "get" and not ri.subresource:
            if not ri.namespace:
                raise _denied(identity, ri, "can only read namespaced object of this type")
            return related("serviceaccounts")
        if verb != "create" or not ri.name:
            raise _denied(identity, ri, "can only create tokens for individual service accounts")
        if ri.subresource != "token":
            raise _denied(identity, ri, "can only create token subresource of serviceaccount")
        return related("serviceaccounts")
    if resource == "services" and verb in ("get", "list", "watch"):
        return  # the node rules: the kubelet's service lister feeds service environment variables
    if resource == "nodes":
        if verb in ("create", "update", "patch", "delete"):
            return  # NodeRestriction limits writes to the node's own object
        if verb in ("get", "list", "watch") and name == node:
            return
        raise _denied(identity, ri, f"node '{node}' cannot read '{name}', only its own Node object" if name
                      else f"node '{node}' cannot read all nodes, only its own Node object", name)
    if resource == "nodes/status" and verb in ("update", "patch", "get"):
        return
    if resource == "pods":
        if verb in ("list", "watch"):
            if _selects(field_selector, "spec.nodeName", node):
                return
            if name:
                return related("pods")
            raise _denied(identity, ri, "can only list/watch pods with spec.nodeName field selector")
        if verb in ("create", "delete"):
            return  # NodeRestriction: mirror pods only, and only pods bound to this node
        if verb == "get":
            if stored_pod is not None and (stored_pod.get("spec") or {}).get("nodeName") == node:
                return
            raise _denied(identity, ri, f"no relationship found between node '{node}' and this object")
    if resource == "pods/status" and verb in ("update", "patch", "get"):
        if verb != "get" or (stored_pod is not None and (stored_pod.get("spec") or {}).get("nodeName") == node):
            return
    if resource == "pods/eviction" and verb == "create":
        return
    if resource == "events" and verb in ("create", "update", "patch"):
        return
    if resource == "leases" and ri.group == "coordination.k8s.io" and verb in ("get", "create", "update", "patch", "delete"):
        return
    if verb == "create" and (ri.group, resource) in REVIEWS_A_NODE_MAY_CREATE:
        return  # the node rules: a kubelet delegates its own API's authn/authz to these
    raise _denied(identity, ri, "")


def _label_namespace(key: str) -> str:
    return key.rpartition("/")[0] if "/" in key else ""


def _forbidden_labels(keys: set[str]) -> list[str]:
    bad = []
    for key in keys:
        namespace = _label_namespace(key)
        if any(namespace == ns or namespace.endswith("." + ns) for ns in FORBIDDEN_NODE_LABEL_NAMESPACES):
            bad.append(key)
    return sorted(bad)


def admit(identity: Identity, ri: RequestInfo, new: dict[str, Any] | None, old: dict[str, Any] | None) -> None:
    """NodeRestriction: raise 403 when a node writes what is not its own."""
    node = node_name_of(identity)
    if node is None or MASTERS_GROUP in identity.groups:
        return
    name = ri.name or ((new or {}).get("metadata") or {}).get("name", "")

    def forbid(message: str) -> errors.ApiError:
        return errors.forbidden(ri.resource, ri.group, name or None, message)

    if ri.resource == "nodes" and ri.verb in ("create", "update", "patch", "delete"):
        if name != node:
            raise forbid(f'node "{node}" is not allowed to modify node "{name}"')
        if ri.verb == "create" and new is not None:
            labels = set(((new.get("metadata") or {}).get("labels") or {}))
            if bad := _forbidden_labels(labels):
                raise forbid(f'node "{node}" is not allowed to set the following labels: {", ".join(bad)}')
        if ri.verb in ("update", "patch") and new is not None and old is not None:
            new_labels = (new.get("metadata") or {}).get("labels") or {}
            old_labels = (old.get("metadata") or {}).get("labels") or {}
            changed = {k for k in set(new_labels) | set(old_labels) if new_labels.get(k) != old_labels.get(k)}
            if bad := _forbidden_labels(changed):
                raise forbid(f'node "{node}" is not allowed to modify labels: {", ".join(bad)}')
            if (new.get("spec") or {}).get("taints") != (old.get("spec") or {}).get("taints"):
                raise forbid(f'node "{node}" is not allowed to modify taints')
        return
    if ri.resource == "pods":
        if ri.subresource == "" and ri.verb == "create" and new is not None:
            _admit_mirror_pod(node, new, forbid)
        elif ri.subresource == "" and ri.verb == "delete":
            if old is not None and (old.get("spec") or {}).get("nodeName") != node:
                raise forbid(f'node "{node}" can only delete pods with spec.nodeName set to itself')
        elif ri.subresource == "status" and ri.verb in ("update", "patch"):
            if old is not None and (old.get("spec") or {}).get("nodeName") != node:
                raise forbid(f'node "{node}" can only update pod status for pods with spec.nodeName set to itself')
        return
    if ri.resource == "leases" and ri.verb in ("create", "update", "patch", "delete"):
        if ri.namespace != NODE_LEASE_NAMESPACE:
            raise forbid(f'can only access leases in the "{NODE_LEASE_NAMESPACE}" system namespace')
        if name != node:
            raise forbid("can only access node lease with the same name as the requesting node")


def _admit_mirror_pod(node: str, pod: dict[str, Any], forbid) -> None:
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    if MIRROR_ANNOTATION not in (meta.get("annotations") or {}):
        raise forbid(f'pod does not have "{MIRROR_ANNOTATION}" annotation, node "{node}" can only create mirror pods')
    if spec.get("nodeName") != node:
        raise forbid(f'node "{node}" can only create pods with spec.nodeName set to itself')
    owners = meta.get("ownerReferences") or []
    if owners:
        own = owners[0]
        if len(owners) > 1 or own.get("apiVersion") != "v1" or own.get("kind") != "Node" or own.get("name") != node:
            raise forbid(f"node {node} can only create pods with an owner reference set to itself")
    if spec.get("serviceAccountName") or spec.get("serviceAccount"):
        raise forbid(f'node "{node}" can not create pods that use service accounts')
    for volume in spec.get("volumes") or ():
        if "secret" in volume:
            raise forbid(f'node "{node}" can not create pods that reference secrets')
        if "configMap" in volume:
            raise forbid(f'node "{node}" can not create pods that reference configmaps')
        if "persistentVolumeClaim" in volume or "ephemeral" in volume:
            raise forbid(f'node "{node}" can not create pods that reference persistentvolumeclaims')
        if "projected" in volume:
            raise forbid(f'node "{node}" can not create pods that reference secrets')
    for kind in ("initContainers", "containers", "ephemeralContainers"):
        for container in spec.get(kind) or ():
            for env in container.get("env") or ():
                source = env.get("valueFrom") or {}
                if "secretKeyRef" in source:
                    raise forbid(f'node "{node}" can not create pods that reference secrets')
                if "configMapKeyRef" in source:
                    raise forbid(f'node "{node}" can not create pods that reference configmaps')
            for env_from in container.get("envFrom") or ():
                if "secretRef" in env_from:
                    raise forbid(f'node "{node}" can not create pods that reference secrets')
                if "configMapRef" in env_from:
                    raise forbid(f'node "{node}" can not create pods that reference configmaps')


def admit_token_request(identity: Identity, ri: RequestInfo, spec: dict[str, Any],
                        get_pod: Callable[[str], dict[str, Any] | None], api_audiences: tuple[str, ...]) -> None:
    """NodeRestriction's admitServiceAccount, with ServiceAccountNodeAudienceRestriction (on
    by default since v1.33): a node's token must be bound to a pod scheduled on it, by name
    and uid, and ask for no audience beyond the API server's and those the pod's projected
    serviceAccountToken sources name."""
    node = node_name_of(identity)
    if node is None or MASTERS_GROUP in identity.groups:
        return

    def forbid(message: str) -> errors.ApiError:
        return errors.forbidden(ri.resource, ri.group, ri.name or None, message)

    ref = spec.get("boundObjectRef") or {}
    if ref.get("apiVersion") != "v1" or ref.get("kind") != "Pod" or not ref.get("name"):
        raise forbid("node requested token not bound to a pod")
    if not ref.get("uid"):
        raise forbid("node requested token with a pod binding without a uid")
    pod = get_pod(ref["name"])
    if pod is None:
        raise errors.not_found("pod", "", ref["name"])  # the pod lister's NotFound names the kind in the singular
    if ref["uid"] != pod["metadata"].get("uid"):
        raise forbid(f"the UID in the bound object reference ({ref['uid']}) does not match the UID in record. "
                     "The object might have been deleted and then recreated")
    if (pod.get("spec") or {}).get("nodeName") != node:
        raise forbid("node requested token bound to a pod scheduled on a different node")
    audiences = spec.get("audiences") or []
    if len(audiences) > 1:
        raise forbid("node may only request 0 or 1 audiences")
    audience = audiences[0] if audiences else ""
    if audience and audience not in api_audiences and audience not in _projected_token_audiences(pod):
        raise forbid(f'audience "{audience}" not found in pod spec volume, {identity.user} is not authorized '
                     "to request tokens for this audience")


def _projected_token_audiences(pod: dict[str, Any]) -> set[str]:
    return {
        (source.get("serviceAccountToken") or {}).get("audience") or ""
        for volume in (pod.get("spec") or {}).get("volumes") or ()
        for source in (volume.get("projected") or {}).get("sources") or ()
        if "serviceAccountToken" in source
    }
