"""The part of kube-apiserver's Go validation that the JSON schemas cannot express and a
kubelet can trip over: names, enums, required images, the pod update and pod status update
rules, lease and event rules. Each function returns a list of 422 causes (empty = valid)."""

from __future__ import annotations

import re
from typing import Any

from tests.support.apiserver import errors

_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_TERMINAL = ("Succeeded", "Failed")

SUBDOMAIN_MSG = ("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
                 "and must start and end with an alphanumeric character (e.g. 'example.com', regex used for "
                 "validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')")
LABEL_MSG = ("a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must "
             "start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for "
             "validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')")


def _is_subdomain(name: str) -> bool:
    return len(name) <= 253 and bool(_DNS1123_SUBDOMAIN.match(name))


def is_label(name: str) -> bool:
    return len(name) <= 63 and bool(_DNS1123_LABEL.match(name))


def object_meta(obj: dict[str, Any], *, name_rule: str = "subdomain", namespaced: bool) -> list[dict[str, str]]:
    meta = obj.get("metadata") or {}
    causes = []
    name = meta.get("name", "")
    if not name:
        causes.append(errors.required("metadata.name"))
    elif name_rule == "subdomain" and not _is_subdomain(name):
        causes.append(errors.invalid_value("metadata.name", name, SUBDOMAIN_MSG))
    elif name_rule == "label" and not is_label(name):
        causes.append(errors.invalid_value("metadata.name", name, LABEL_MSG))
    elif name_rule == "path" and ("/" in name or "%" in name or name in (".", "..")):
        causes.append(errors.invalid_value("metadata.name", name, "may not contain '/' or '%'"))
    for key, value in (meta.get("labels") or {}).items():
        if not _qualified_key(key):
            causes.append(errors.invalid_value("metadata.labels", key, "name part must consist of alphanumeric characters, '-', '_' or '.'"))
        if not (isinstance(value, str) and len(value) <= 63 and _LABEL_VALUE.match(value)):
            causes.append(errors.invalid_value("metadata.labels", value, "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.'"))
    for key in meta.get("annotations") or {}:
        if not _qualified_key(key):
            causes.append(errors.invalid_value("metadata.annotations", key, "name part must consist of alphanumeric characters, '-', '_' or '.'"))
    return causes


def _qualified_key(key: str) -> bool:
    prefix, _, name = key.rpartition("/")
    if prefix and not _is_subdomain(prefix):
        return False
    return 0 < len(name) <= 63 and bool(_QUALIFIED_NAME.match(name))


def one_of(value: Any, allowed: list[str], path: str, causes: list[dict[str, str]]) -> None:
    if value is not None and value not in allowed:
        causes.append(errors.not_supported(path, value, allowed))


def pod(obj: dict[str, Any]) -> list[dict[str, str]]:
    causes = object_meta(obj, namespaced=True)
    spec = obj.get("spec") or {}
    containers = spec.get("containers") or []
    if not containers:
        causes.append(errors.required("spec.containers"))
    one_of(spec.get("restartPolicy"), ["Always", "OnFailure", "Never"], "spec.restartPolicy", causes)
    one_of(spec.get("dnsPolicy"), ["ClusterFirstWithHostNet", "ClusterFirst", "Default", "None"], "spec.dnsPolicy", causes)
    grace = spec.get("terminationGracePeriodSeconds")
    if isinstance(grace, int) and grace < 0:
        causes.append(errors.invalid_value("spec.terminationGracePeriodSeconds", grace, "must be greater than or equal to 0"))
    volumes = set()
    for index, volume in enumerate(spec.get("volumes") or ()):
        name = volume.get("name", "")
        path = f"spec.volumes[{index}].name"
        if not is_label(name):
            causes.append(errors.invalid_value(path, name, LABEL_MSG) if name else errors.required(path))
        elif name in volumes:
            causes.append(errors.duplicate(path, name))
        volumes.add(name)
    names: set[str] = set()
    for kind in ("initContainers", "containers"):
        for index, container in enumerate(spec.get(kind) or ()):
            causes += _container(container, f"spec.{kind}[{index}]", names, volumes)
    return causes


def _container(container: dict[str, Any], path: str, names: set[str], volumes: set[str]) -> list[dict[str, str]]:
    causes: list[dict[str, str]] = []
    name = container.get("name", "")
    if not name:
        causes.append(errors.required(f"{path}.name"))
    elif not is_label(name):
        causes.append(errors.invalid_value(f"{path}.name", name, LABEL_MSG))
    elif name in names:
        causes.append(errors.duplicate(f"{path}.name", name))
    names.add(name)
    image = container.get("image", "")
    if not image:
        causes.append(errors.required(f"{path}.image"))
    elif image != image.strip():
        causes.append(errors.invalid_value(f"{path}.image", image, "must not have leading or trailing whitespace"))
    one_of(container.get("imagePullPolicy"), ["Always", "IfNotPresent", "Never"], f"{path}.imagePullPolicy", causes)
    one_of(container.get("terminationMessagePolicy"), ["File", "FallbackToLogsOnError"], f"{path}.terminationMessagePolicy", causes)
    for index, port in enumerate(container.get("ports") or ()):
        number = port.get("containerPort")
        if isinstance(number, int) and not 0 < number < 65536:
            causes.append(errors.invalid_value(f"{path}.ports[{index}].containerPort", number, "must be between 1 and 65535, inclusive"))
        one_of(port.get("protocol"), ["SCTP", "TCP", "UDP"], f"{path}.ports[{index}].protocol", causes)
    for index, mount in enumerate(container.get("volumeMounts") or ()):
        if mount.get("name") not in volumes:
            causes.append(errors.field_cause("FieldValueNotFound", f"{path}.volumeMounts[{index}].name", f'Not found: "{mount.get("name")}"'))
        if not mount.get("mountPath"):
            causes.append(errors.required(f"{path}.volumeMounts[{index}].mountPath"))
    for kind in ("livenessProbe", "readinessProbe", "startupProbe"):
        probe = container.get(kind)
        if isinstance(probe, dict):
            handlers = [h for h in ("exec", "httpGet", "tcpSocket", "grpc") if h in probe]
            if len(handlers) != 1:
                causes.append(errors.required(f"{path}.{kind}") if not handlers else
                              errors.forbidden_field(f"{path}.{kind}.{handlers[1]}", "may not specify more than 1 handler type"))
    return causes


# Fields of a pod's spec an update may change (ValidatePodUpdate).
_MUTABLE_SPEC = ("activeDeadlineSeconds", "tolerations", "terminationGracePeriodSeconds", "schedulingGates")
SPEC_UPDATE_MSG = ("pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,"
                   "`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),"
                   "`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)")


def _without_mutable(spec: dict[str, Any]) -> dict[str, Any]:
    spec = {k: v for k, v in spec.items() if k not in _MUTABLE_SPEC}
    for kind in ("initContainers", "containers"):
        if kind in spec:
            spec[kind] = [{k: v for k, v in c.items() if k != "image"} for c in spec[kind]]
    return spec


def pod_update(new: dict[str, Any], old: dict[str, Any]) -> list[dict[str, str]]:
    causes = pod(new)
    if _without_mutable(new.get("spec") or {}) != _without_mutable(old.get("spec") or {}):
        causes.append(errors.forbidden_field("spec", SPEC_UPDATE_MSG))
    return causes


def pod_resize(new: dict[str, Any], old: dict[str, Any]) -> list[dict[str, str]]:
    """kube-apiserver's checks of pods/resize (in-place resize, GA in 1.35): a running pod's
    containers' cpu and memory may change, its QoS class may not."""
    causes = pod(new)
    phase = (old.get("status") or {}).get("phase")
    if phase in _TERMINAL:
        causes.append(errors.forbidden_field("spec", f"pod resize may not be applied to a {phase} pod"))
    before, after = _qos(old.get("spec") or {}), _qos(new.get("spec") or {})
    if before != after:
        causes.append(errors.invalid_value("spec.containers", after, f"Pod QOS Class may not change as a result of resizing (was {before})"))
    return causes


def _qos(spec: dict[str, Any]) -> str:
    """GetPodQOS over a spec in API form (cpu and memory; a missing request is its limit)."""
    requests: dict[str, bool] = {}
    guaranteed, any_set = True, False
    for container in [*(spec.get("containers") or ()), *(spec.get("initContainers") or ())]:
        res = container.get("resources") or {}
        limits = {k: v for k, v in (res.get("limits") or {}).items() if k in ("cpu", "memory")}
        reqs = {**limits, **{k: v for k, v in (res.get("requests") or {}).items() if k in ("cpu", "memory")}}
        any_set = any_set or bool(limits) or bool(reqs)
        if set(limits) != {"cpu", "memory"} or any(reqs.get(k) != limits.get(k) for k in limits):
            guaranteed = False
        requests.update(reqs)
    if not any_set:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


def pod_status_update(new: dict[str, Any], old: dict[str, Any]) -> list[dict[str, str]]:
    causes: list[dict[str, str]] = []
    status, old_status = new.get("status") or {}, old.get("status") or {}
    old_phase, phase = old_status.get("phase"), status.get("phase")
    if old_phase in _TERMINAL and phase != old_phase:
        causes.append(errors.forbidden_field("status.phase", f"may not transition from terminal phase {old_phase} to {phase}"))
    if old_status.get("qosClass") and status.get("qosClass") != old_status["qosClass"]:
        causes.append(errors.invalid_value("status.qosClass", status.get("qosClass"), "field is immutable"))
    one_of(phase, ["Pending", "Running", "Succeeded", "Failed", "Unknown"], "status.phase", causes)
    for index, condition in enumerate(status.get("conditions") or ()):
        one_of(condition.get("status"), ["True", "False", "Unknown"], f"status.conditions[{index}].status", causes)
    pod_ips = [entry.get("ip") for entry in status.get("podIPs") or ()]
    if status.get("podIP") and pod_ips and pod_ips[0] != status["podIP"]:
        causes.append(errors.invalid_value("status.podIPs[0].ip", pod_ips[0], "must be equal to podIP"))
    if len(set(pod_ips)) != len(pod_ips):
        causes.append(errors.duplicate("status.podIPs", pod_ips))
    restart_never = (new.get("spec") or {}).get("restartPolicy") == "Never"
    for kind in ("initContainerStatuses", "containerStatuses"):
        old_by_name = {s.get("name"): s for s in old_status.get(kind) or ()}
        spec_kind = "initContainers" if kind == "initContainerStatuses" else "containers"
        spec_names = {c.get("name") for c in (new.get("spec") or {}).get(spec_kind) or ()}
        for index, cs in enumerate(status.get(kind) or ()):
            path = f"status.{kind}[{index}]"
            if cs.get("name") not in spec_names:
                causes.append(errors.field_cause("FieldValueNotFound", f"{path}.name", f'Not found: "{cs.get("name")}"'))
            states = [s for s in ("waiting", "running", "terminated") if s in (cs.get("state") or {})]
            if len(states) > 1:
                causes.append(errors.forbidden_field(f"{path}.state", "may not specify more than 1 state"))
            previous = old_by_name.get(cs.get("name"))
            if restart_never and kind == "containerStatuses" and previous is not None:
                if "terminated" in (previous.get("state") or {}) and "terminated" not in (cs.get("state") or {}):
                    causes.append(errors.forbidden_field(f"{path}.state", "may not be transitioned to non-terminated state"))
            if isinstance(cs.get("restartCount"), int) and cs["restartCount"] < 0:
                causes.append(errors.invalid_value(f"{path}.restartCount", cs["restartCount"], "must be greater than or equal to 0"))
    return causes


def node(obj: dict[str, Any]) -> list[dict[str, str]]:
    causes = object_meta(obj, namespaced=False)
    for index, condition in enumerate((obj.get("status") or {}).get("conditions") or ()):
        one_of(condition.get("status"), ["True", "False", "Unknown"], f"status.conditions[{index}].status", causes)
    return causes


def lease(obj: dict[str, Any]) -> list[dict[str, str]]:
    causes = object_meta(obj, namespaced=True)
    spec = obj.get("spec") or {}
    duration = spec.get("leaseDurationSeconds")
    if duration is not None and duration <= 0:
        causes.append(errors.invalid_value("spec.leaseDurationSeconds", duration, "must be greater than 0"))
    transitions = spec.get("leaseTransitions")
    if transitions is not None and transitions < 0:
        causes.append(errors.invalid_value("spec.leaseTransitions", transitions, "must be greater than or equal to 0"))
    return causes


def event(obj: dict[str, Any]) -> list[dict[str, str]]:
    causes = object_meta(obj, name_rule="path", namespaced=True)
    namespace = (obj.get("metadata") or {}).get("namespace", "")
    involved = obj.get("involvedObject") or {}
    involved_ns = involved.get("namespace", "")
    if not involved_ns:
        if namespace not in ("", "default"):
            causes.append(errors.invalid_value("involvedObject.namespace", involved_ns, "does not match event.namespace"))
    elif involved_ns != namespace:
        causes.append(errors.invalid_value("involvedObject.namespace", involved_ns, "does not match event.namespace"))
    if obj.get("type"):
        one_of(obj["type"], ["Normal", "Warning"], "type", causes)
    if isinstance(obj.get("count"), int) and obj["count"] < 0:
        causes.append(errors.invalid_value("count", obj["count"], "must be greater than or equal to 0"))
    return causes


def namespace(obj: dict[str, Any]) -> list[dict[str, str]]:
    return object_meta(obj, name_rule="label", namespaced=False)
