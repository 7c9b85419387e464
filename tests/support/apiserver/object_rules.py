"""Go-side validation and decoding of the objects a kubelet reads to run a pod: ConfigMaps,
Secrets (base64 `data`, `stringData` folded in on decode, the per-type required keys),
Services and ServiceAccounts (pkg/apis/core/validation). Each rule function returns a list
of 422 causes; the decode functions raise 400 as the Go decoder does."""

from __future__ import annotations

import base64
import binascii
import json
import re
from typing import Any

from tests.support.apiserver import errors, rules

MAX_SECRET_SIZE = 1024 * 1024
_CONFIG_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")
_DNS1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_IANA_SVC_NAME = re.compile(r"^[-a-z0-9]+$")
CONFIG_KEY_MSG = ("a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or "
                  "'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')")
DNS1035_MSG = ("a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic "
               "character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for "
               "validation is '[a-z]([-a-z0-9]*[a-z0-9])?')")
IMMUTABLE_SET_MSG = "field is immutable when `immutable` is set"
# Secret types and the data keys each requires (ValidateSecret).
_REQUIRED_SECRET_KEYS = {
    "kubernetes.io/dockercfg": (".dockercfg",),
    "kubernetes.io/dockerconfigjson": (".dockerconfigjson",),
    "kubernetes.io/ssh-auth": ("ssh-privatekey",),
    "kubernetes.io/tls": ("tls.crt", "tls.key"),
}
_JSON_SECRET_KEYS = {"kubernetes.io/dockercfg": ".dockercfg", "kubernetes.io/dockerconfigjson": ".dockerconfigjson"}


# --- decoding (v1 -> internal) ------------------------------------------------------------


def _decode_bytes(kind: str, values: dict[str, Any] | None) -> dict[str, bytes]:
    """[]byte fields travel as standard base64; a bad one fails the Go decoder (400)."""
    out = {}
    for key, value in (values or {}).items():
        try:
            out[key] = base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError, TypeError):
            raise errors.bad_request(f'{kind} in version "v1" cannot be handled as a {kind}: '
                                     f"illegal base64 data at input byte {_bad_byte(value)}") from None
    return out


def _bad_byte(value: Any) -> int:
    text = value if isinstance(value, str) else ""
    for index, char in enumerate(text):
        if not (char.isalnum() or char in "+/="):
            return index
    return max(len(text) - 1, 0)


def decode_configmap(obj: dict[str, Any]) -> None:
    _decode_bytes("ConfigMap", obj.get("binaryData"))


def decode_secret(obj: dict[str, Any]) -> None:
    """Check `data` is base64 and fold `stringData` into it (Convert_v1_Secret_To_core_Secret):
    a stored or returned Secret never has stringData."""
    _decode_bytes("Secret", obj.get("data"))
    string_data = obj.pop("stringData", None) or {}
    if string_data:
        data = obj.setdefault("data", {})
        for key, value in string_data.items():
            data[key] = base64.b64encode(str(value).encode()).decode()


# --- validation ---------------------------------------------------------------------------


def _config_key_causes(path: str, key: str) -> list[dict[str, str]]:
    where = f"{path}[{key}]"
    if len(key) > 253:
        return [errors.invalid_value(where, key, "must be no more than 253 characters")]
    if not _CONFIG_KEY.match(key):
        return [errors.invalid_value(where, key, CONFIG_KEY_MSG)]
    if key == ".":
        return [errors.invalid_value(where, key, "must not be '.'")]
    if key == "..":
        return [errors.invalid_value(where, key, "must not be '..'")]
    if key.startswith(".."):
        return [errors.invalid_value(where, key, "must not start with '..'")]
    return []


def configmap(obj: dict[str, Any]) -> list[dict[str, str]]:
    causes = rules.object_meta(obj, namespaced=True)
    data, binary = obj.get("data") or {}, obj.get("binaryData") or {}
    size = 0
    for key, value in data.items():
        causes += _config_key_causes("data", key)
        if key in binary:
            causes.append(errors.invalid_value(f"data[{key}]", key, "duplicate of key present in binaryData"))
        size += len(str(value).encode())
    for key, value in binary.items():
        causes += _config_key_causes("binaryData", key)
        size += len(base64.b64decode(value))
    if size > MAX_SECRET_SIZE:
        causes.append(errors.field_cause("FieldValueTooLong", "", f"Too long: may not be more than {MAX_SECRET_SIZE} bytes"))
    return causes


def _immutable_causes(new: dict[str, Any], old: dict[str, Any], fields: tuple[str, ...]) -> list[dict[str, str]]:
    if not old.get("immutable"):
        return []
    causes = []
    if not new.get("immutable"):
        causes.append(errors.forbidden_field("immutable", IMMUTABLE_SET_MSG))
    for name in fields:
        if (new.get(name) or {}) != (old.get(name) or {}):
            causes.append(errors.forbidden_field(name, IMMUTABLE_SET_MSG))
    return causes


def configmap_update(new: dict[str, Any], old: dict[str, Any]) -> list[dict[str, str]]:
    return configmap(new) + _immutable_causes(new, old, ("data", "binaryData"))


def secret(obj: dict[str, Any]) -> list[dict[str, str]]:
    causes = rules.object_meta(obj, namespaced=True)
    data = obj.get("data") or {}
    decoded = _decode_bytes("Secret", data)
    for key in data:
        causes += _config_key_causes("data", key)
    if sum(len(v) for v in decoded.values()) > MAX_SECRET_SIZE:
        causes.append(errors.field_cause("FieldValueTooLong", "data", f"Too long: may not be more than {MAX_SECRET_SIZE} bytes"))
    kind = obj.get("type") or "Opaque"
    if kind == "kubernetes.io/service-account-token":
        if not ((obj.get("metadata") or {}).get("annotations") or {}).get("kubernetes.io/service-account.name"):
            causes.append(errors.required("metadata.annotations[kubernetes.io/service-account.name]"))
    elif kind == "kubernetes.io/basic-auth":
        if "username" not in data and "password" not in data:
            causes += [errors.required("data[username]"), errors.required("data[password]")]
    for key in _REQUIRED_SECRET_KEYS.get(kind, ()):
        if key not in data or (kind == "kubernetes.io/ssh-auth" and not decoded.get(key)):
            causes.append(errors.required(f"data[{key}]"))
    if (json_key := _JSON_SECRET_KEYS.get(kind)) and json_key in decoded:
        try:
            if not isinstance(json.loads(decoded[json_key]), dict):
                raise ValueError("json: cannot unmarshal into Go value of type map[string]interface {}")
        except ValueError as exc:
            causes.append(errors.invalid_value(f"data[{json_key}]", "<secret contents redacted>", str(exc)))
    return causes


def secret_update(new: dict[str, Any], old: dict[str, Any]) -> list[dict[str, str]]:
    causes = secret(new)
    if (new.get("type") or "Opaque") != (old.get("type") or "Opaque"):
        causes.append(errors.invalid_value("type", new.get("type"), "field is immutable"))
    return causes + _immutable_causes(new, old, ("data",))


def serviceaccount(obj: dict[str, Any]) -> list[dict[str, str]]:
    return rules.object_meta(obj, namespaced=True)


def service(obj: dict[str, Any]) -> list[dict[str, str]]:
    causes = rules.object_meta(obj, name_rule="none", namespaced=True)
    name = (obj.get("metadata") or {}).get("name", "")
    if name and not (len(name) <= 63 and _DNS1035_LABEL.match(name)):
        causes.append(errors.invalid_value("metadata.name", name, DNS1035_MSG))
    spec = obj.get("spec") or {}
    kind = spec.get("type", "ClusterIP")
    rules.one_of(kind, ["ClusterIP", "ExternalName", "LoadBalancer", "NodePort"], "spec.type", causes)
    rules.one_of(spec.get("sessionAffinity"), ["ClientIP", "None"], "spec.sessionAffinity", causes)
    headless = spec.get("clusterIP") == "None"
    ports = spec.get("ports") or []
    if not ports and not headless and kind != "ExternalName":
        causes.append(errors.required("spec.ports"))
    if kind == "ExternalName":
        if not spec.get("externalName"):
            causes.append(errors.required("spec.externalName"))
        if spec.get("clusterIP"):
            causes.append(errors.forbidden_field("spec.clusterIP", "may not be set for ExternalName services"))
    names: set[str] = set()
    seen: set[tuple[Any, Any]] = set()
    for index, port in enumerate(ports):
        causes += _service_port(port, f"spec.ports[{index}]", len(ports) > 1, names)
        key = (port.get("port"), port.get("protocol"))
        if key in seen:
            causes.append(errors.duplicate(f"spec.ports[{index}]", port))
        seen.add(key)
    return causes


def _service_port(port: dict[str, Any], path: str, named: bool, names: set[str]) -> list[dict[str, str]]:
    causes: list[dict[str, str]] = []
    name = port.get("name", "")
    if not name:
        if named:
            causes.append(errors.required(f"{path}.name"))
    elif not rules.is_label(name):
        causes.append(errors.invalid_value(f"{path}.name", name, rules.LABEL_MSG))
    elif name in names:
        causes.append(errors.duplicate(f"{path}.name", name))
    names.add(name)
    number = port.get("port")
    if isinstance(number, int) and not 0 < number < 65536:
        causes.append(errors.invalid_value(f"{path}.port", number, "must be between 1 and 65535, inclusive"))
    rules.one_of(port.get("protocol"), ["SCTP", "TCP", "UDP"], f"{path}.protocol", causes)
    target = port.get("targetPort")
    if isinstance(target, int) and not 0 < target < 65536:
        causes.append(errors.invalid_value(f"{path}.targetPort", target, "must be between 1 and 65535, inclusive"))
    if isinstance(target, str) and not (0 < len(target) <= 15 and _IANA_SVC_NAME.match(target)
                                        and re.search("[a-z]", target) and "--" not in target
                                        and not target.startswith("-") and not target.endswith("-")):
        causes.append(errors.invalid_value(f"{path}.targetPort", target, "must contain only alpha-numeric characters "
                                           "(a-z, 0-9), and hyphens (-)"))
    node_port = port.get("nodePort")
    if isinstance(node_port, int) and not 0 < node_port < 65536:
        causes.append(errors.invalid_value(f"{path}.nodePort", node_port, "must be between 1 and 65535, inclusive"))
    return causes


def service_update(new: dict[str, Any], old: dict[str, Any]) -> list[dict[str, str]]:
    causes = service(new)
    old_ip, new_ip = (old.get("spec") or {}).get("clusterIP"), (new.get("spec") or {}).get("clusterIP")
    if old_ip and new_ip != old_ip and (new.get("spec") or {}).get("type") != "ExternalName":
        causes.append(errors.invalid_value("spec.clusterIPs[0]", [new_ip], "may not change once set"))
    return causes
