"""Field and label selectors as list and watch take them: the fields each resource
supports (anything else is 400 "field label not supported"), and label selectors with
=, ==, !=, in, notin, exists and !exists."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from tests.support.apiserver import errors

# The field labels kube-apiserver registers for each resource (GetAttrs of its strategy).
FIELD_LABELS: dict[str, dict[str, tuple[str, ...]]] = {
    "pods": {
        "metadata.name": ("metadata", "name"),
        "metadata.namespace": ("metadata", "namespace"),
        "spec.nodeName": ("spec", "nodeName"),
        "spec.restartPolicy": ("spec", "restartPolicy"),
        "spec.schedulerName": ("spec", "schedulerName"),
        "spec.serviceAccountName": ("spec", "serviceAccountName"),
        "spec.hostNetwork": ("spec", "hostNetwork"),
        "status.phase": ("status", "phase"),
        "status.podIP": ("status", "podIP"),
        "status.nominatedNodeName": ("status", "nominatedNodeName"),
    },
    "nodes": {"metadata.name": ("metadata", "name"), "spec.unschedulable": ("spec", "unschedulable")},
    "leases": {"metadata.name": ("metadata", "name"), "metadata.namespace": ("metadata", "namespace")},
    "namespaces": {"metadata.name": ("metadata", "name"), "status.phase": ("status", "phase")},
    "configmaps": {"metadata.name": ("metadata", "name"), "metadata.namespace": ("metadata", "namespace")},
    "secrets": {"metadata.name": ("metadata", "name"), "metadata.namespace": ("metadata", "namespace"),
                "type": ("type",)},
    "services": {"metadata.name": ("metadata", "name"), "metadata.namespace": ("metadata", "namespace"),
                 "spec.clusterIP": ("spec", "clusterIP"), "spec.type": ("spec", "type")},
    "serviceaccounts": {"metadata.name": ("metadata", "name"), "metadata.namespace": ("metadata", "namespace")},
    "events": {
        "metadata.name": ("metadata", "name"),
        "metadata.namespace": ("metadata", "namespace"),
        "involvedObject.kind": ("involvedObject", "kind"),
        "involvedObject.namespace": ("involvedObject", "namespace"),
        "involvedObject.name": ("involvedObject", "name"),
        "involvedObject.uid": ("involvedObject", "uid"),
        "involvedObject.apiVersion": ("involvedObject", "apiVersion"),
        "involvedObject.resourceVersion": ("involvedObject", "resourceVersion"),
        "involvedObject.fieldPath": ("involvedObject", "fieldPath"),
        "reason": ("reason",),
        "reportingComponent": ("reportingComponent",),
        "source": ("source", "component"),
        "type": ("type",),
    },
}


@dataclass(frozen=True)
class FieldRequirement:
    field: str
    op: str  # "=" or "!="
    value: str


def parse_field_selector(text: str | None, resource: str) -> list[FieldRequirement]:
    if not text:
        return []
    requirements = []
    for term in _split_terms(text):
        match = re.fullmatch(r"\s*([^=!\s]+)\s*(==|=|!=)\s*(.*?)\s*", term)
        if match is None:
            raise errors.bad_request(f'invalid field selector: invalid selector: \'{text}\'; can\'t understand \'{term}\'')
        name, op, value = match.groups()
        if name not in FIELD_LABELS.get(resource, {}):
            raise errors.bad_request(f'field label not supported: {name}')
        requirements.append(FieldRequirement(name, "!=" if op == "!=" else "=", value))
    return requirements


def _split_terms(text: str) -> list[str]:
    terms, depth, current = [], 0, ""
    for char in text:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 0:
            terms.append(current)
            current = ""
        else:
            current += char
    if current:
        terms.append(current)
    return [t for t in terms if t.strip()]


def field_value(obj: dict[str, Any], resource: str, name: str) -> str:
    node: Any = obj
    for part in FIELD_LABELS[resource][name]:
        node = node.get(part) if isinstance(node, dict) else None
    if node is None:
        return ""
    if isinstance(node, bool):
        return "true" if node else "false"
    return str(node)


def fields_match(obj: dict[str, Any], resource: str, requirements: list[FieldRequirement]) -> bool:
    for req in requirements:
        actual = field_value(obj, resource, req.field)
        if (actual == req.value) != (req.op == "="):
            return False
    return True


@dataclass(frozen=True)
class LabelRequirement:
    key: str
    op: str  # "=", "!=", "in", "notin", "exists", "!exists"
    values: tuple[str, ...] = ()


def parse_label_selector(text: str | None) -> list[LabelRequirement]:
    if not text:
        return []
    requirements = []
    for term in _split_terms(text):
        term = term.strip()
        if match := re.fullmatch(r"([\w./-]+)\s+(in|notin)\s+\(([^)]*)\)", term):
            values = tuple(v.strip() for v in match.group(3).split(",") if v.strip())
            requirements.append(LabelRequirement(match.group(1), match.group(2), values))
        elif match := re.fullmatch(r"([\w./-]+)\s*(==|=|!=)\s*([\w./-]*)", term):
            op = "!=" if match.group(2) == "!=" else "="
            requirements.append(LabelRequirement(match.group(1), op, (match.group(3),)))
        elif match := re.fullmatch(r"!\s*([\w./-]+)", term):
            requirements.append(LabelRequirement(match.group(1), "!exists"))
        elif match := re.fullmatch(r"([\w./-]+)", term):
            requirements.append(LabelRequirement(match.group(1), "exists"))
        else:
            raise errors.bad_request(f"unable to parse requirement: {term!r}")
    return requirements


def labels_match(obj: dict[str, Any], requirements: list[LabelRequirement]) -> bool:
    labels = (obj.get("metadata") or {}).get("labels") or {}
    for req in requirements:
        present = req.key in labels
        value = labels.get(req.key)
        ok = {
            "=": present and value == req.values[0],
            "!=": not present or value != req.values[0],
            "in": present and value in req.values,
            "notin": not present or value not in req.values,
            "exists": present,
            "!exists": not present,
        }[req.op]
        if not ok:
            return False
    return True
