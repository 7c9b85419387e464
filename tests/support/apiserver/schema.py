"""The official Kubernetes schemas (from the kubernetes-validate package) as the test API
server uses them: validate a written object (all errors, not only the first), walk an
object beside its schema to decode it the way kube-apiserver does (drop nulls and empty
lists/maps, canonical quantities and times, find unknown fields), and read the
x-kubernetes-patch-strategy / patch-merge-key extensions for strategic merge patch."""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass, field
from typing import Any

import importlib_resources
import jsonschema
import referencing
from kubernetes_validate import utils as kv_utils

from tests.support.apiserver import errors, values

KUBERNETES_VERSION = "1.36"  # newest schema set kubernetes-validate ships that matches DESIGN.md's v1.36
_TIME = "io.k8s.apimachinery.pkg.apis.meta.v1.Time"
_MICRO_TIME = "io.k8s.apimachinery.pkg.apis.meta.v1.MicroTime"
_QUANTITY = "io.k8s.apimachinery.pkg.api.resource.Quantity"


def _schema_dir() -> str:
    versions = [v for v in kv_utils.all_versions() if kv_utils.major_minor(v) == KUBERNETES_VERSION]
    version = versions[-1] if versions else kv_utils.latest_version()
    return f"v{version}-local-strict"


@functools.cache
def _load(filename: str) -> Any:
    ref = importlib_resources.files("kubernetes_validate").joinpath(f"kubernetes-json-schema/{_schema_dir()}/{filename}")
    return json.loads(ref.read_text())


@functools.cache
def definitions() -> dict[str, Any]:
    return _load("_definitions.json")["$defs"]


@functools.cache
def definition_name(group: str, version: str, kind: str) -> str:
    for name, schema in definitions().items():
        for gvk in schema.get("x-kubernetes-group-version-kind", ()):
            if (gvk["group"], gvk["version"], gvk["kind"]) == (group, version, kind):
                return name
    raise KeyError(f"no schema for {group}/{version} {kind}")


def resolve(schema: dict[str, Any] | None) -> tuple[str | None, dict[str, Any]]:
    """(definition name or None, the schema with $ref followed)."""
    name = None
    while schema is not None and "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        schema = definitions()[name]
    return name, (schema or {})


def property_schema(schema: dict[str, Any], key: str) -> dict[str, Any] | None:
    """The schema of a struct field or map value, None when the key is not known."""
    _, resolved = resolve(schema)
    props = resolved.get("properties")
    if props is not None:
        return props.get(key)
    extra = resolved.get("additionalProperties")
    if isinstance(extra, dict):
        return extra
    return None


def items_schema(schema: dict[str, Any] | None) -> dict[str, Any] | None:
    _, resolved = resolve(schema)
    return resolved.get("items")


def patch_strategy(schema: dict[str, Any] | None) -> tuple[set[str], str | None]:
    """(strategies such as {"merge", "retainKeys"}, merge key) of a field's schema."""
    if schema is None:
        return set(), None
    strategy = schema.get("x-kubernetes-patch-strategy") or resolve(schema)[1].get("x-kubernetes-patch-strategy") or ""
    key = schema.get("x-kubernetes-patch-merge-key") or resolve(schema)[1].get("x-kubernetes-patch-merge-key")
    return {s for s in strategy.split(",") if s}, key


def kind_schema(group: str, version: str, kind: str) -> dict[str, Any]:
    return {"$ref": "#/$defs/" + definition_name(group, version, kind)}


# --- decoding ---------------------------------------------------------------------------


@dataclass
class Decoded:
    obj: dict[str, Any]
    unknown_fields: list[str] = field(default_factory=list)


def field_path(parts: list[Any] | tuple[Any, ...]) -> str:
    out = ""
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out


_DROP = object()


def decode(obj: dict[str, Any], group: str, version: str, kind: str) -> Decoded:
    """The object as kube-apiserver would store it; raises ApiError 400 for undecodable values."""
    result = Decoded(obj={})
    result.obj = _decode(obj, kind_schema(group, version, kind), [], result, required=True)
    return result


def _decode(value: Any, schema: dict[str, Any] | None, path: list[Any], out: Decoded, *, required: bool) -> Any:
    if value is None:
        return _DROP
    name, resolved = resolve(schema)
    try:
        if name == _QUANTITY and isinstance(value, (str, int, float)) and not isinstance(value, bool):
            return values.canonical_quantity(value)
        if name == _TIME and isinstance(value, str):
            return values.canonical_time(value)
        if name == _MICRO_TIME and isinstance(value, str):
            return values.canonical_micro_time(value)
    except values.DecodeError as exc:
        raise errors.bad_request(f"{field_path(path)}: {exc}") from None
    if isinstance(value, dict):
        props = resolved.get("properties")
        extra = resolved.get("additionalProperties")
        if props is None and not isinstance(extra, dict):
            return value  # free-form (RawExtension and the like)
        needed = set(resolved.get("required", ()))
        decoded: dict[str, Any] = {}
        for key, item in value.items():
            sub = props.get(key) if props is not None else extra
            if sub is None:
                out.unknown_fields.append(field_path([*path, key]))
                continue
            item = _decode(item, sub, [*path, key], out, required=key in needed)
            if item is not _DROP:
                decoded[key] = item
        if not decoded and props is None and not required:
            return _DROP  # an empty Go map is omitted
        return decoded
    if isinstance(value, list):
        sub = resolved.get("items")
        decoded_list = []
        for index, item in enumerate(value):
            item = _decode(item, sub, [*path, index], out, required=True)
            decoded_list.append(None if item is _DROP else item)
        if not decoded_list and not required:
            return _DROP  # an empty Go slice is omitted
        return decoded_list
    return value


# --- validation ---------------------------------------------------------------------------


@functools.cache
def _validator(group: str, version: str, kind: str) -> jsonschema.protocols.Validator:
    api_version = f"{group}/{version}" if group else version
    schema_api = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
    schema = _load(f"{kind.lower()}-{schema_api}.json")
    registry = referencing.Registry().with_resources(
        [
            (schema["$id"], referencing.Resource.from_contents(schema)),
            (_load("_definitions.json")["$id"], referencing.Resource.from_contents(_load("_definitions.json"))),
        ]
    )
    return jsonschema.Draft202012Validator(schema, registry=registry)


def validate(obj: dict[str, Any], group: str, version: str, kind: str) -> None:
    """Raise ApiError 400 (wrong JSON types) or 422 Invalid (everything else) for a bad object."""
    validator = _validator(group, version, kind)
    found = sorted(validator.iter_errors(obj), key=lambda e: [str(p) for p in e.absolute_path])
    if not found:
        return
    type_errors = [e for e in found if e.validator in ("type", "oneOf", "anyOf")]
    if type_errors:
        e = type_errors[0]
        go_field = ".".join(str(p) for p in e.absolute_path if not isinstance(p, int))
        raise errors.bad_request(
            f'{kind} in version "{version}" cannot be handled as a {kind}: json: cannot unmarshal '
            f"{_json_type(e.instance)} into Go struct field {kind}.{go_field} of type {_schema_type(e.schema)}"
        )
    causes = []
    for e in found:
        where = list(e.absolute_path)
        if e.validator == "required":
            for missing in e.validator_value:
                if not isinstance(e.instance, dict) or missing not in e.instance:
                    causes.append(errors.required(field_path([*where, missing])))
        elif e.validator == "enum":
            causes.append(errors.not_supported(field_path(where), e.instance, [str(v) for v in e.validator_value if v is not None]))
        elif e.validator == "additionalProperties":
            for key in e.instance:
                causes.append(errors.field_cause("FieldValueNotSupported", field_path([*where, key]), "unknown field"))
        else:
            causes.append(errors.invalid_value(field_path(where), e.instance, e.message))
    meta = obj.get("metadata") or {}
    raise errors.invalid(kind, meta.get("name", ""), group, causes)


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return "null"


def _schema_type(schema: dict[str, Any]) -> str:
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "")
    return {"integer": "int32", "number": "float64", "boolean": "bool", "array": "[]", "object": "struct"}.get(kind or "", str(kind))
