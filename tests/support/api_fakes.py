"""Helpers for unit tests of actors that talk to the API server through a fake client."""

from __future__ import annotations

import copy

from pykubelet.ports.apiserver.errors import error_from_status


def api_error(status: int, reason: str, message: str = "", *, method: str, path: str) -> BaseException:
    """The error the API client raises for this answer (ports/apiserver maps it)."""
    return error_from_status(status, {"kind": "Status", "reason": reason, "message": message}, method=method, path=path)


def apply_strategic_merge(obj: dict, patch: dict) -> dict:
    """Applies a Node status strategic merge patch as the API server does, for what
    status_patch emits: maps merged (null deletes), conditions merged by type in
    $setElementOrder's order, "$patch": "replace" lists replaced, other lists replaced."""
    result = copy.deepcopy(obj)
    for key, value in patch.items():
        if key.startswith("$setElementOrder/"):
            continue
        if value is None:
            result.pop(key, None)
        elif isinstance(value, dict) and isinstance(result.get(key), dict):
            result[key] = apply_strategic_merge(result[key], value)
        elif isinstance(value, list) and f"$setElementOrder/{key}" in patch:
            by_type = {item["type"]: item for item in result.get(key) or []}
            for item in value:
                if item.get("$patch") == "delete":
                    by_type.pop(item["type"], None)
                else:
                    by_type[item["type"]] = apply_strategic_merge(by_type.get(item["type"], {}), item)
            order = [entry["type"] for entry in patch[f"$setElementOrder/{key}"]]
            result[key] = [by_type[t] for t in order if t in by_type] + [
                v for t, v in by_type.items() if t not in order
            ]
        elif isinstance(value, list):
            result[key] = [copy.deepcopy(v) for v in value if v != {"$patch": "replace"}]
        else:
            result[key] = copy.deepcopy(value)
    return result
