"""The resources this API server serves and their strategies (kube-apiserver's
pkg/registry/*/strategy.go in small): defaults on create, which part of an object a write
to the main resource or to /status may change, Go-side validation, and graceful deletion."""

from __future__ import annotations

import copy
import uuid
from dataclasses import dataclass
from typing import Any, Callable

from tests.support.apiserver import defaults, errors, object_rules, rules, values
from tests.support.apiserver.store import ResourceType

PODS = ResourceType("pods", "", "v1", "Pod", True)
NODES = ResourceType("nodes", "", "v1", "Node", False)
LEASES = ResourceType("leases", "coordination.k8s.io", "v1", "Lease", True)
EVENTS = ResourceType("events", "", "v1", "Event", True)
NAMESPACES = ResourceType("namespaces", "", "v1", "Namespace", False)
CONFIGMAPS = ResourceType("configmaps", "", "v1", "ConfigMap", True)
SECRETS = ResourceType("secrets", "", "v1", "Secret", True)
SERVICES = ResourceType("services", "", "v1", "Service", True)
SERVICEACCOUNTS = ResourceType("serviceaccounts", "", "v1", "ServiceAccount", True)
TOKEN_REQUEST = ResourceType("serviceaccounts/token", "authentication.k8s.io", "v1", "TokenRequest", True)

INITIAL_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
_SYSTEM_META = ("uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "generation")


@dataclass(frozen=True)
class Strategy:
    type: ResourceType
    subresources: frozenset[str]
    create_defaults: Callable[[dict[str, Any]], None]
    validate: Callable[[dict[str, Any]], list[dict[str, str]]]
    has_status: bool = False  # main-resource writes keep the stored status; /status writes only status
    generation: bool = False  # metadata.generation counts spec changes
    graceful: bool = False  # DELETE honours gracePeriodSeconds (pods)
    create_on_update: bool = False
    return_deleted_object: bool = False
    update_rules: Callable[[dict[str, Any], dict[str, Any]], list[dict[str, str]]] | None = None
    status_rules: Callable[[dict[str, Any], dict[str, Any]], list[dict[str, str]]] | None = None
    convert: Callable[[dict[str, Any]], None] | None = None  # v1 -> internal conversion (after decoding)


STRATEGIES: dict[tuple[str, str], Strategy] = {
    ("", "pods"): Strategy(
        PODS, frozenset({"status", "binding", "resize"}), defaults.default_pod, rules.pod,
        has_status=True, generation=True, graceful=True, return_deleted_object=True,
        update_rules=rules.pod_update, status_rules=rules.pod_status_update,
    ),
    ("", "nodes"): Strategy(NODES, frozenset({"status"}), defaults.default_node, rules.node, has_status=True),
    ("coordination.k8s.io", "leases"): Strategy(LEASES, frozenset(), defaults.default_lease, rules.lease),
    ("", "events"): Strategy(EVENTS, frozenset(), lambda obj: None, rules.event, create_on_update=True),
    ("", "namespaces"): Strategy(NAMESPACES, frozenset({"status"}), defaults.default_namespace, rules.namespace, has_status=True),
    ("", "configmaps"): Strategy(CONFIGMAPS, frozenset(), lambda obj: None, object_rules.configmap,
                                 update_rules=object_rules.configmap_update, convert=object_rules.decode_configmap),
    ("", "secrets"): Strategy(SECRETS, frozenset(), defaults.default_secret, object_rules.secret,
                              update_rules=object_rules.secret_update, convert=object_rules.decode_secret),
    ("", "services"): Strategy(SERVICES, frozenset({"status"}), defaults.default_service, object_rules.service,
                               has_status=True, update_rules=object_rules.service_update),
    ("", "serviceaccounts"): Strategy(SERVICEACCOUNTS, frozenset({"token"}), lambda obj: None, object_rules.serviceaccount),
}
# Subresources that only take POST (the real server has no other route for them: 405).
CREATE_ONLY_SUBRESOURCES = frozenset({"binding", "token"})


def strategy_for(group: str, resource: str) -> Strategy | None:
    return STRATEGIES.get((group, resource))


def now_time() -> str:
    return values.format_time(values.now())


def prepare_for_create(strategy: Strategy, obj: dict[str, Any]) -> None:
    meta = obj["metadata"]
    for key in _SYSTEM_META + ("managedFields", "selfLink"):
        meta.pop(key, None)
    meta["uid"] = str(uuid.uuid4())
    meta["creationTimestamp"] = now_time()
    if strategy.generation:
        meta["generation"] = 1
    strategy.create_defaults(obj)


def prepare_for_update(strategy: Strategy, new: dict[str, Any], old: dict[str, Any], subresource: str) -> dict[str, Any]:
    """The object to store for a write of `new` over `old` through the main resource or /status."""
    if subresource == "resize":  # kube-apiserver's resize strategy: only the containers' resources
        result = copy.deepcopy(old)
        for kind in ("containers", "initContainers"):
            wanted = {c.get("name"): c for c in (new.get("spec") or {}).get(kind) or ()}
            for container in result["spec"].get(kind) or ():
                if container.get("name") in wanted:
                    container["resources"] = wanted[container["name"]].get("resources") or {}
        if result["spec"] != old["spec"]:
            result["metadata"]["generation"] = int(old["metadata"].get("generation", 0)) + 1
        return result
    if subresource == "status":
        result = copy.deepcopy(old)
        if "status" in new:
            result["status"] = new["status"]
        else:
            result.pop("status", None)
        result["metadata"]["resourceVersion"] = old["metadata"].get("resourceVersion")
        return result
    meta = new.setdefault("metadata", {})
    old_meta = old["metadata"]
    meta.pop("managedFields", None)
    meta.pop("selfLink", None)
    for key in ("creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "generation"):
        if key in old_meta:
            meta[key] = old_meta[key]
        else:
            meta.pop(key, None)
    if not meta.get("uid"):
        meta["uid"] = old_meta.get("uid")
    if strategy.has_status:
        if "status" in old:
            new["status"] = old["status"]
        else:
            new.pop("status", None)
    if strategy.generation and new.get("spec") != old.get("spec"):
        meta["generation"] = int(old_meta.get("generation", 0)) + 1
    return new


def immutable_meta_causes(new: dict[str, Any], old: dict[str, Any]) -> list[dict[str, str]]:
    causes = []
    for key in ("name", "namespace", "uid"):
        if new["metadata"].get(key, "") != old["metadata"].get(key, ""):
            causes.append(errors.invalid_value(f"metadata.{key}", new["metadata"].get(key, ""), "field is immutable"))
    return causes


def graceful_period(pod: dict[str, Any], requested: int | None) -> int:
    """podStrategy.CheckGracefulDelete: the grace period a delete of this pod gets."""
    spec = pod.get("spec") or {}
    period = requested if requested is not None else int(spec.get("terminationGracePeriodSeconds") or 0)
    if not spec.get("nodeName"):
        period = 0
    if (pod.get("status") or {}).get("phase") in ("Failed", "Succeeded"):
        period = 0
    if period < 0:
        period = 1
    return period
