"""Pod admission: does a pod bound to this node fit it? The Go kubelet's predicate admit
handler (pkg/kubelet/lifecycle/predicate.go, the scheduler's AdmissionCheck): the pod's OS,
then pykubelet's own check that the pod sets no field it does not implement
(pods/unsupported.py), then pod count and cpu/memory requests against allocatable, then
nodeSelector and required node affinity against the node's labels, then spec.nodeName.
Pure; the sync loop calls it on ADD and fails a rejected pod with the first reason, as Go does.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from pykubelet.messages.pod import NodeSelectorRequirement, NodeSelectorTerm, Pod, PodCondition

from .container_resources import pod_requests
from pykubelet.pods.security_context import security_admission
from pykubelet.pods.resources import parse_quantity
from pykubelet.pods.unsupported import unsupported_fields

# Go's reasons: "OutOf" + the resource name for a resource, the plugin name otherwise.
OUT_OF_PODS = "OutOfpods"
OUT_OF_CPU = "OutOfcpu"
OUT_OF_MEMORY = "OutOfmemory"
NODE_AFFINITY = "NodeAffinity"
NODE_NAME = "NodeName"
POD_OS_SELECTOR_NODE_LABEL_DOES_NOT_MATCH = "PodOSSelectorNodeLabelDoesNotMatch"
POD_OS_NOT_SUPPORTED = "PodOSNotSupported"
# pykubelet's own, Go-like; stable, so that an operator can select on it.
UNSUPPORTED_POD_SPEC = "UnsupportedPodSpec"

NODE_AFFINITY_MESSAGE = "Predicate NodeAffinity failed: node(s) didn't match Pod's node affinity/selector"
NODE_NAME_MESSAGE = "Predicate NodeName failed: node(s) didn't match the requested node name"
POD_OS_SELECTOR_MESSAGE = "Failed to admit pod as the `kubernetes.io/os` label doesn't match node label"
POD_OS_MESSAGE = "Failed to admit pod as the OS field doesn't match node OS"

NODE_OS = "linux"  # Go compares with runtime.GOOS; pykubelet runs Linux containers only


@dataclass(frozen=True)
class Admission:
    """admit()'s answer; unpacks as (ok, reason, message)."""

    ok: bool
    reason: str = ""
    message: str = ""

    def __iter__(self):
        return iter((self.ok, self.reason, self.message))


ADMITTED = Admission(True)


def admit(
    pod: Pod,
    *,
    node_name: str,
    node_labels: Mapping[str, str],
    allocatable: Mapping[str, int],
    running_pods: Iterable[Pod],
    requests_of: Callable[[Pod], Mapping[str, int]] = pod_requests,
) -> Admission:
    """Whether `pod` may run here next to `running_pods` (the pods already admitted and
    not terminated). allocatable: {"cpu": millicores, "memory": bytes, "pods": count}
    (see node_allocatable); a resource missing from it is not checked. requests_of: the
    running pods' pod_requests, which a caller admitting many pods may keep per pod."""
    # Checks that no eviction could help come first, as in Go.
    if pod.metadata.labels.get("kubernetes.io/os", NODE_OS) != NODE_OS:
        return Admission(False, POD_OS_SELECTOR_NODE_LABEL_DOES_NOT_MATCH, POD_OS_SELECTOR_MESSAGE)
    if isinstance(pod.spec.os, dict) and pod.spec.os.get("name", "") != NODE_OS:
        return Admission(False, POD_OS_NOT_SUPPORTED, POD_OS_MESSAGE)
    if refused := unsupported_fields(pod).refused:
        return unsupported(refused)
    if (refusal := security_admission(pod)) is not None:
        return Admission(False, *refusal)  # forbidden sysctls (SysctlForbidden), as Go
    others = list(running_pods)
    if "pods" in allocatable and len(others) + 1 > allocatable["pods"]:
        return _insufficient("pods", 1, len(others), allocatable["pods"])
    wanted = pod_requests(pod)  # Go's resource.PodRequests: sidecars, init peaks, overhead
    if wanted.get("cpu") or wanted.get("memory"):
        used = {"cpu": 0, "memory": 0}
        for other in others:
            requests = requests_of(other)
            used["cpu"] += requests.get("cpu", 0)
            used["memory"] += requests.get("memory", 0)
        for resource in ("cpu", "memory"):
            capacity, requested = allocatable.get(resource), wanted.get(resource, 0)
            if capacity is not None and requested > 0 and requested > capacity - used[resource]:
                return _insufficient(resource, requested, used[resource], capacity)
    if not matches_node_selector(pod, node_name=node_name, node_labels=node_labels):
        return Admission(False, NODE_AFFINITY, NODE_AFFINITY_MESSAGE)
    if pod.spec.node_name and pod.spec.node_name != node_name:
        return Admission(False, NODE_NAME, NODE_NAME_MESSAGE)
    return ADMITTED


def unsupported(fields: tuple[str, ...]) -> Admission:
    """The rejection of a pod that sets fields pykubelet does not implement, naming each."""
    them = "it" if len(fields) == 1 else "them"
    return Admission(
        False,
        UNSUPPORTED_POD_SPEC,
        f"pykubelet does not implement {', '.join(fields)}; remove {them} or run the pod on another node",
    )


def _insufficient(resource: str, requested: int, used: int, capacity: int) -> Admission:
    return Admission(
        False,
        f"OutOf{resource}",
        f"Node didn't have enough resource: {resource}, requested: {requested}, used: {used}, capacity: {capacity}",
    )


# --- requests ------------------------------------------------------------------------


def _millis(text: str) -> int:
    # Go's Quantity.MilliValue rounds up.
    return math.ceil(parse_quantity(text) * 1000)


def _units(text: str) -> int:
    # Go's Quantity.Value rounds up.
    return math.ceil(parse_quantity(text))


def node_allocatable(allocatable: Mapping[str, str]) -> dict[str, int]:
    """A Node's status.allocatable ({"cpu": "4", "memory": "8Gi", "pods": "110"}) in the
    units admit() takes."""
    out: dict[str, int] = {}
    if "cpu" in allocatable:
        out["cpu"] = _millis(allocatable["cpu"])
    if "memory" in allocatable:
        out["memory"] = _units(allocatable["memory"])
    if "pods" in allocatable:
        out["pods"] = _units(allocatable["pods"])
    return out


# --- node selector and required node affinity ------------------------------------------


def matches_node_selector(pod: Pod, *, node_name: str, node_labels: Mapping[str, str]) -> bool:
    """component-helpers' GetRequiredNodeAffinity(pod).Match(node): every nodeSelector
    label, and (when given) any one of the required node affinity terms."""
    if any(node_labels.get(key) != value for key, value in pod.spec.node_selector.items()):
        return False
    affinity = pod.spec.affinity
    required = affinity.node_affinity.required_during_scheduling_ignored_during_execution if (
        affinity is not None and affinity.node_affinity is not None) else None
    if required is None:
        return True
    # Terms are ORed; an empty term, or one Go cannot parse, matches nothing.
    return any(_term_matches(term, node_name, node_labels) for term in required.node_selector_terms)


def _term_matches(term: NodeSelectorTerm, node_name: str, labels: Mapping[str, str]) -> bool:
    if not term.match_expressions and not term.match_fields:
        return False
    return all(_label_matches(r, labels) for r in term.match_expressions) and all(
        _field_matches(r, {"metadata.name": node_name}) for r in term.match_fields
    )


def _label_matches(requirement: NodeSelectorRequirement, labels: Mapping[str, str]) -> bool:
    op, values, key = requirement.operator, requirement.values, requirement.key
    present = key in labels
    if op in ("In", "NotIn"):
        if not values:
            return False  # invalid requirement
        inside = present and labels[key] in values
        return inside if op == "In" else not inside
    if op in ("Exists", "DoesNotExist"):
        if values:
            return False
        return present if op == "Exists" else not present
    if op in ("Gt", "Lt"):
        if len(values) != 1:
            return False
        bound, label = _int64(values[0]), _int64(labels[key]) if present else None
        if bound is None or label is None:
            return False
        return label > bound if op == "Gt" else label < bound
    return False  # an unknown operator makes the term fail


def _field_matches(requirement: NodeSelectorRequirement, fields: Mapping[str, str]) -> bool:
    # Fields take In and NotIn with exactly one value; only metadata.name is set on a node.
    if requirement.operator not in ("In", "NotIn") or len(requirement.values) != 1:
        return False
    equal = fields.get(requirement.key, "") == requirement.values[0]
    return equal if requirement.operator == "In" else not equal


_INT = re.compile(r"[+-]?[0-9]+")


def _int64(text: str) -> int | None:
    """Go's strconv.ParseInt(text, 10, 64): no spaces or underscores, within int64."""
    if not _INT.fullmatch(text):
        return None
    value = int(text)
    return value if -(2**63) <= value < 2**63 else None



# --- in-place resize ------------------------------------------------------------------


POD_RESIZE_PENDING = "PodResizePending"


def resize_pending(pod: Pod, *, allocatable: Mapping[str, int], running_pods: Iterable[Pod]) -> PodCondition | None:
    """Whether a resized pod's new requests fit the node (Go: the allocation manager's
    handlePodResourcesResize): None when they do; else the PodResizePending condition,
    reason Infeasible when the pod alone is larger than the node's allocatable, Deferred
    when it does not fit next to the others now. allocatable as admit()'s."""
    wanted = pod_requests(pod)
    others = [pod_requests(p) for p in running_pods if p.metadata.uid != pod.metadata.uid]
    for resource in ("cpu", "memory"):
        capacity = allocatable.get(resource)
        requested = wanted.get(resource, 0)
        if capacity is None or not requested:
            continue
        if requested > capacity:
            return PodCondition(type=POD_RESIZE_PENDING, status="True", reason="Infeasible",
                                message=f"Node didn't have enough capacity: {resource}, requested: {requested}, "
                                        f"capacity: {capacity}")
        used = sum(o.get(resource, 0) for o in others)
        if used + requested > capacity:
            return PodCondition(type=POD_RESIZE_PENDING, status="True", reason="Deferred",
                                message=f"Node didn't have enough resource: {resource}, requested: {requested}, "
                                        f"used: {used}, capacity: {capacity}")
    return None
