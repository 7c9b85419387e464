"""The body of the kubelet's PATCH of pods/status: a two-way strategic merge patch from the
status the API server holds to the kubelet's, with the pod's UID as a precondition (Go:
statusutil.PatchPodStatus, after the status manager's mergePodStatus). Pure.

Lists follow the PodStatus schema's patch strategies: conditions merge by type and podIPs
by ip (only what changed, `$setElementOrder` for the order, `$patch: delete` for what
went), initContainerStatuses and containerStatuses are atomic (the whole list is sent when
any entry changed, as Go sends it), every other field is replaced. Fields the kubelet does
not model (nominatedNodeName, resize, hostIPs, ...) are never touched.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from pykubelet.messages.pod import PodCondition, PodIP, PodStatus

from .conditions import KUBELET_CONDITIONS, SHARED_CONDITIONS

# The fields a PodStatus models, by their API names, and how each list merges.
_STATUS_FIELDS = tuple(f.encode_name for f in msgspec.structs.fields(PodStatus))
_MERGE_KEYS = {"conditions": "type", "podIPs": "ip"}
_ITEM_FIELDS = {
    "conditions": frozenset(f.encode_name for f in msgspec.structs.fields(PodCondition)) - {"lastProbeTime"},
    "podIPs": frozenset(f.encode_name for f in msgspec.structs.fields(PodIP)),
}
_ATOMIC = frozenset({"initContainerStatuses", "containerStatuses"})
# A ContainerStatus as the API requires it (schema: name, ready, restartCount, image,
# imageID) and as Go always serialises it (state, lastState).
_CONTAINER_STATUS_ALWAYS = {"image": "", "imageID": "", "state": {}, "lastState": {}}


def status_patch(old: Mapping[str, Any] | None, new: PodStatus, *, uid: str) -> dict[str, Any] | None:
    """The strategic merge patch that turns the API's status `old` (the pod's .status as
    the API server serves it; None when unknown) into `new`, or None when they already
    agree. Conditions the kubelet does not own (readiness gates, DisruptionTarget, ...) are
    kept as the API holds them; lastProbeTime is ignored."""
    old = old or {}
    wanted = merge_pod_status(old, new)
    diff: dict[str, Any] = {}
    for name in _STATUS_FIELDS:
        before, after = _clean(old.get(name), name), _clean(wanted.get(name), name)
        if before == after:
            continue
        if name in _MERGE_KEYS:
            diff.update(_merge_list_patch(name, before or [], after or []))
        elif name in _ATOMIC:
            diff[name] = [_container_status(item) for item in wanted.get(name) or []] or None
        else:
            diff[name] = after  # None deletes the field
    if not diff:
        return None
    return {"metadata": {"uid": uid}, "status": diff}


def merge_pod_status(old: Mapping[str, Any], new: PodStatus) -> dict[str, Any]:
    """Go's mergePodStatus, on the API form: the new status, whose conditions are the
    API's conditions not owned by the kubelet followed by the kubelet's own; a condition
    the kubelet shares with others (DisruptionTarget) is the kubelet's when it sets one."""
    wanted = msgspec.to_builtins(new)
    shared = {c.get("type") for c in wanted.get("conditions") or [] if c.get("type") in SHARED_CONDITIONS}
    theirs = [c for c in old.get("conditions") or []
              if isinstance(c, Mapping) and c.get("type") not in KUBELET_CONDITIONS and c.get("type") not in shared]
    ours = [c for c in wanted.get("conditions") or [] if c.get("type") in KUBELET_CONDITIONS | shared]
    wanted["conditions"] = [dict(c) for c in theirs] + ours
    return wanted


def _merge_list_patch(name: str, before: list[dict[str, Any]], after: list[dict[str, Any]]) -> dict[str, Any]:
    """The patch of a list merged by key: changed and new items (changed ones as their
    own diff plus the key), deletes for items that went, and the new order."""
    if not after:
        return {name: None}
    key = _MERGE_KEYS[name]
    old_items = {item.get(key): item for item in before}
    new_keys = [item.get(key) for item in after]
    items: list[dict[str, Any]] = []
    for item in after:
        previous = old_items.get(item.get(key))
        if previous is None:
            items.append(item)
        elif previous != item:
            items.append({**_item_diff(previous, item, _ITEM_FIELDS[name]), key: item.get(key)})
    items += [{"$patch": "delete", key: k} for k in old_items if k not in new_keys]
    patch: dict[str, Any] = {f"$setElementOrder/{name}": [{key: k} for k in new_keys]}
    if items:
        patch[name] = items
    return patch


def _item_diff(before: Mapping[str, Any], after: Mapping[str, Any], modelled: frozenset[str]) -> dict[str, Any]:
    diff = {k: v for k, v in after.items() if before.get(k) != v}
    # A field the kubelet models and no longer sets is deleted; others are not its to drop.
    diff.update({k: None for k in before if k not in after and k in modelled})
    return diff


def _container_status(item: Mapping[str, Any]) -> dict[str, Any]:
    return {**_CONTAINER_STATUS_ALWAYS, **item}


def _clean(value: Any, field: str = "") -> Any:
    """The value as compared: no nulls, empty strings, maps or lists (the API server
    drops most of them and the kubelet's encoding omits them), no lastProbeTime in a
    condition; None when nothing is left."""
    if isinstance(value, Mapping):
        cleaned = {k: c for k, v in value.items() if (c := _clean(v)) is not None}
        if field == "conditions":
            cleaned.pop("lastProbeTime", None)
        return cleaned or None
    if isinstance(value, list):
        cleaned_list = [c for v in value if (c := _clean(v, field)) is not None]
        return cleaned_list or None
    if value is None or value == "":
        return None
    return value
