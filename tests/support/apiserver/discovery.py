"""Legacy discovery (/api/v1, /apis, /apis/<group>/<version>): what kubectl reads to map
`kubectl logs chatty` to the pods resource. Built from the resources this server serves."""

from __future__ import annotations

from typing import Any

from tests.support.apiserver import resources
from tests.support.apiserver.request_info import KUBELET_SUBRESOURCES

_VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
# Subresources answered by other handlers than the strategies': (resource, subresource, kind, verbs).
_EXTRA = [("pods", s, "PodProxyOptions" if s != "log" else "Pod", ["get"] if s == "log" else ["create", "get"])
          for s in sorted(KUBELET_SUBRESOURCES)] + [("nodes", "proxy", "NodeProxyOptions", ["create", "get"])]


def groups() -> dict[str, Any]:
    names = sorted({group for group, _ in resources.STRATEGIES if group})
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": [
        {"name": name, "versions": [{"groupVersion": f"{name}/v1", "version": "v1"}],
         "preferredVersion": {"groupVersion": f"{name}/v1", "version": "v1"}} for name in names]}


def resource_list(group: str) -> dict[str, Any] | None:
    """The APIResourceList of <group>/v1 ("" for the core group), None for a group not served."""
    listed = []
    for (strategy_group, name), strategy in sorted(resources.STRATEGIES.items()):
        if strategy_group != group:
            continue
        kind, namespaced = strategy.type.kind, strategy.type.namespaced
        listed.append({"name": name, "singularName": kind.lower(), "namespaced": namespaced, "kind": kind,
                       "verbs": _VERBS})
        for sub in sorted(strategy.subresources):
            listed.append({"name": f"{name}/{sub}", "singularName": "", "namespaced": namespaced, "kind": kind,
                           "verbs": ["create"] if sub in resources.CREATE_ONLY_SUBRESOURCES else ["get", "patch", "update"]})
    if group == "":
        for name, sub, kind, verbs in _EXTRA:
            listed.append({"name": f"{name}/{sub}", "singularName": "", "namespaced": name == "pods", "kind": kind,
                           "verbs": verbs})
    if not listed:
        return None
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": f"{group}/v1" if group else "v1",
            "resources": listed}
