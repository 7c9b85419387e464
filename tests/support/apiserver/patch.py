"""The three patch types kube-apiserver accepts for built-in kinds: strategic merge patch
(driven by the schemas' x-kubernetes-patch-strategy / patch-merge-key, so a list merges
by its key exactly where the real server merges it and is replaced where it is atomic),
JSON merge patch (RFC 7386) and JSON patch (RFC 6902)."""

from __future__ import annotations

import copy
from typing import Any

from tests.support.apiserver import errors, schema

STRATEGIC = "application/strategic-merge-patch+json"
MERGE = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
APPLY = "application/apply-patch+yaml"

_DELETE = object()
_ORDER = "$setElementOrder/"
_DELETE_PRIMITIVES = "$deleteFromPrimitiveList/"


class PatchError(Exception):
    pass


def apply(content_type: str, original: dict[str, Any], patch: Any, type_schema: dict[str, Any]) -> dict[str, Any]:
    try:
        if content_type == STRATEGIC:
            if not isinstance(patch, dict):
                raise PatchError("strategic merge patch must be a JSON object")
            result = _merge_map(copy.deepcopy(original), patch, type_schema)
            return {} if result is _DELETE else result
        if content_type == MERGE:
            if not isinstance(patch, dict):
                raise PatchError("merge patch must be a JSON object")
            return json_merge_patch(copy.deepcopy(original), patch)
        if content_type == JSON_PATCH:
            return json_patch(copy.deepcopy(original), patch)
    except PatchError as exc:
        raise errors.ApiError(422, str(exc), reason="Invalid") from None
    raise errors.unsupported_media_type(content_type)


# --- strategic merge patch -------------------------------------------------------------


def _merge_map(original: dict[str, Any], patch: dict[str, Any], field_schema: dict[str, Any] | None) -> Any:
    directive = patch.get("$patch")
    if directive == "delete":
        return _DELETE
    if directive == "replace":
        return _merge_map({}, {k: v for k, v in patch.items() if k != "$patch"}, field_schema)
    if directive not in (None, "merge"):
        raise PatchError(f"Unknown patch type: {directive}")
    result = dict(original)
    orders: dict[str, list[Any]] = {}
    for key, value in patch.items():
        if key.startswith(_DELETE_PRIMITIVES):
            name = key[len(_DELETE_PRIMITIVES):]
            if isinstance(result.get(name), list) and isinstance(value, list):
                result[name] = [item for item in result[name] if item not in value]
    for key, value in patch.items():
        if key in ("$patch", "$retainKeys") or key.startswith(_DELETE_PRIMITIVES):
            continue
        if key.startswith(_ORDER):
            orders[key[len(_ORDER):]] = value
            continue
        if value is None:
            result.pop(key, None)
            continue
        sub = schema.property_schema(field_schema, key) if field_schema is not None else None
        current = result.get(key)
        if isinstance(value, dict):
            merged = _merge_map(current if isinstance(current, dict) else {}, value, sub)
        elif isinstance(value, list):
            merged = _merge_list(current if isinstance(current, list) else [], value, sub)
        else:
            merged = value
        if merged is _DELETE:
            result.pop(key, None)
        else:
            result[key] = merged
    for name, order in orders.items():
        if isinstance(result.get(name), list):
            result[name] = _apply_order(result[name], order, schema.patch_strategy(
                schema.property_schema(field_schema, name) if field_schema is not None else None)[1])
    retain = patch.get("$retainKeys")
    if isinstance(retain, list):
        result = {k: v for k, v in result.items() if k in retain}
    return result


def _merge_list(original: list[Any], patch: list[Any], field_schema: dict[str, Any] | None) -> Any:
    strategies, merge_key = schema.patch_strategy(field_schema)
    item_schema = schema.items_schema(field_schema) if field_schema is not None else None
    if "merge" not in strategies:
        # atomic: the patch's list replaces the stored one (directives stripped)
        return [_strip(item, item_schema) for item in patch if not _is_directive(item)]
    if any(isinstance(item, dict) and item.get("$patch") == "replace" for item in patch):
        return [_strip(item, item_schema) for item in patch if not _is_directive(item)]
    if merge_key is None:  # a list of primitives merges as a set union
        result = list(original)
        for item in patch:
            if isinstance(item, dict) and item.get("$patch") == "delete":
                continue
            if item not in result:
                result.append(item)
        return result
    result = list(original)
    for item in patch:
        if not isinstance(item, dict):
            raise PatchError(f"merging an object in a list but the patch element is not a map: {item!r}")
        if merge_key not in item:
            raise PatchError(f"map: {item} does not contain declared merge key: {merge_key}")
        index = next((i for i, cur in enumerate(result) if isinstance(cur, dict) and cur.get(merge_key) == item[merge_key]), None)
        if item.get("$patch") == "delete":
            result = [cur for cur in result if not (isinstance(cur, dict) and cur.get(merge_key) == item[merge_key])]
            continue
        if index is None:
            result.append(_strip(item, item_schema))
        else:
            merged = _merge_map(result[index], item, item_schema)
            if merged is _DELETE:
                del result[index]
            else:
                result[index] = merged
    return result


def _is_directive(item: Any) -> bool:
    return isinstance(item, dict) and set(item) == {"$patch"}


def _strip(value: Any, field_schema: dict[str, Any] | None) -> Any:
    """A new value from a patch, with its directives and nulls removed."""
    if isinstance(value, dict):
        merged = _merge_map({}, value, field_schema)
        return {} if merged is _DELETE else merged
    if isinstance(value, list):
        return _merge_list([], value, field_schema)
    return value


def _apply_order(items: list[Any], order: list[Any], merge_key: str | None) -> list[Any]:
    """Order a merged list as $setElementOrder says; elements it does not name keep their
    relative order after the named ones."""

    def key_of(item: Any) -> Any:
        if merge_key is not None and isinstance(item, dict):
            return item.get(merge_key)
        return item

    wanted = [key_of(o) if isinstance(o, dict) else o for o in order]
    by_key = {}
    rest = []
    for item in items:
        k = key_of(item)
        if k in wanted and k not in by_key:
            by_key[k] = item
        else:
            rest.append(item)
    return [by_key[k] for k in wanted if k in by_key] + rest


# --- JSON merge patch (RFC 7386) ----------------------------------------------------------


def json_merge_patch(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return patch
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = json_merge_patch(result.get(key), value)
    return result


# --- JSON patch (RFC 6902) ----------------------------------------------------------------


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise PatchError(f"invalid JSON pointer: {path!r}")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _parent(doc: Any, parts: list[str]) -> tuple[Any, str]:
    node = doc
    for part in parts[:-1]:
        if isinstance(node, list):
            node = node[int(part)]
        elif isinstance(node, dict) and part in node:
            node = node[part]
        else:
            raise PatchError(f"doc is missing path: /{'/'.join(parts)}")
    return node, parts[-1]


def _get(doc: Any, parts: list[str]) -> Any:
    node = doc
    for part in parts:
        try:
            node = node[int(part)] if isinstance(node, list) else node[part]
        except (KeyError, IndexError, ValueError, TypeError):
            raise PatchError(f"doc is missing path: /{'/'.join(parts)}") from None
    return node


def _add(doc: Any, parts: list[str], value: Any) -> Any:
    if not parts:
        return value
    parent, last = _parent(doc, parts)
    if isinstance(parent, list):
        index = len(parent) if last == "-" else int(last)
        if index > len(parent):
            raise PatchError(f"add operation does not apply: index {index} out of range")
        parent.insert(index, value)
    elif isinstance(parent, dict):
        parent[last] = value
    else:
        raise PatchError("add operation does not apply: parent is not a container")
    return doc


def _remove(doc: Any, parts: list[str]) -> Any:
    parent, last = _parent(doc, parts)
    try:
        if isinstance(parent, list):
            del parent[int(last)]
        else:
            del parent[last]
    except (KeyError, IndexError, ValueError, TypeError):
        raise PatchError(f"remove operation does not apply: doc is missing path: /{'/'.join(parts)}") from None
    return doc


def json_patch(doc: Any, operations: Any) -> Any:
    if not isinstance(operations, list):
        raise PatchError("JSON patch must be a list of operations")
    for op in operations:
        if not isinstance(op, dict) or "op" not in op or "path" not in op:
            raise PatchError(f"invalid JSON patch operation: {op!r}")
        parts = _pointer(op["path"])
        kind = op["op"]
        if kind == "add":
            doc = _add(doc, parts, copy.deepcopy(op.get("value")))
        elif kind == "remove":
            doc = _remove(doc, parts)
        elif kind == "replace":
            _get(doc, parts)
            doc = _add(_remove(doc, parts), parts, copy.deepcopy(op.get("value"))) if parts else op.get("value")
        elif kind in ("move", "copy"):
            source = _pointer(op.get("from", ""))
            value = copy.deepcopy(_get(doc, source))
            if kind == "move":
                doc = _remove(doc, source)
            doc = _add(doc, parts, value)
        elif kind == "test":
            if _get(doc, parts) != op.get("value"):
                raise PatchError(f"testing value /{'/'.join(parts)} failed")
        else:
            raise PatchError(f"Unexpected kind: {kind}")
    return doc
