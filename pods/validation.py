"""Validation of a defaulted Pod, as the API server's ValidatePodCreate would do it: the
cheap checks that catch typos in a manifest before the kubelet tries to run it.

Pure: validate_pod(pod) returns every problem as "<field path>: <what is wrong>".
"""

from __future__ import annotations

import re

from pykubelet.messages.pod import Container, Pod, Probe

DNS1123_LABEL_MAX = 63
DNS1123_SUBDOMAIN_MAX = 253

_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_LABEL = re.compile(_LABEL)
_DNS1123_SUBDOMAIN = re.compile(rf"{_LABEL}(\.{_LABEL})*")
_QUALIFIED_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_IANA_SVC_NAME = re.compile(r"[a-z0-9]([a-z0-9-]*[a-z0-9])?")

# The distribution reference grammar (docker/distribution reference/regexp.go).
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN = rf"(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*|\[[0-9a-fA-F:.]+\])(?::[0-9]+)?"
_PATH_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|[-]+)[a-z0-9]+)*"
_IMAGE_REFERENCE = re.compile(
    rf"(?:{_DOMAIN}/)?{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*"
    r"(?::[\w][\w.-]{0,127})?"
    r"(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?"
)

RESTART_POLICIES = ("Always", "OnFailure", "Never")
PULL_POLICIES = ("Always", "IfNotPresent", "Never")
DNS_POLICIES = ("ClusterFirstWithHostNet", "ClusterFirst", "Default", "None")
PROTOCOLS = ("TCP", "UDP", "SCTP")
MESSAGE_POLICIES = ("File", "FallbackToLogsOnError")
HOST_PATH_TYPES = ("", "DirectoryOrCreate", "Directory", "FileOrCreate", "File", "Socket", "CharDevice", "BlockDevice")
TOLERATION_OPERATORS = ("", "Equal", "Exists")
TAINT_EFFECTS = ("", "NoSchedule", "PreferNoSchedule", "NoExecute")


def _one_of(value: str, allowed: tuple[str, ...]) -> str:
    return f'unsupported value "{value}" (one of {", ".join(allowed)})'


def dns1123_label_error(value: str) -> str | None:
    if len(value) > DNS1123_LABEL_MAX:
        return f'"{value}" is longer than {DNS1123_LABEL_MAX} characters'
    if not _DNS1123_LABEL.fullmatch(value):
        return f'"{value}" is not a DNS-1123 label (lowercase letters, digits and "-", starting and ending alphanumeric)'
    return None


def dns1123_subdomain_error(value: str) -> str | None:
    if len(value) > DNS1123_SUBDOMAIN_MAX:
        return f'"{value}" is longer than {DNS1123_SUBDOMAIN_MAX} characters'
    if not _DNS1123_SUBDOMAIN.fullmatch(value):
        return f'"{value}" is not a DNS-1123 subdomain (lowercase letters, digits, "-" and ".", starting and ending alphanumeric)'
    return None


def _qualified_name_error(key: str) -> str | None:
    prefix, _, name = key.rpartition("/")
    if "/" in key and (not prefix or dns1123_subdomain_error(prefix)):
        return f'key "{key}": the prefix must be a DNS-1123 subdomain'
    if not name or len(name) > 63 or not _QUALIFIED_NAME.fullmatch(name):
        return f'key "{key}" is not a qualified name (at most 63 letters, digits, "-", "_" or ".", starting and ending alphanumeric)'
    return None


def _port_name_error(name: str) -> str | None:
    if len(name) > 15 or not _IANA_SVC_NAME.fullmatch(name) or "--" in name or not re.search("[a-z]", name):
        return f'"{name}" is not a valid port name (at most 15 lowercase letters, digits and "-", with a letter)'
    return None


def image_reference_error(image: str) -> str | None:
    if not image:
        return "required"
    if image.strip() != image:
        return f'"{image}" must not have leading or trailing whitespace'
    if not _IMAGE_REFERENCE.fullmatch(image) or len(image.split("@")[0].rsplit(":", 1)[0]) > 255:
        return f'invalid reference format "{image}"'
    return None


def _env_name_error(name: str) -> str | None:
    # RelaxedEnvironmentVariableValidation (GA in 1.34): printable ASCII except "=".
    if not name:
        return "required"
    if "=" in name or any(not (32 <= ord(ch) <= 126) for ch in name):
        return f'"{name}" is not a valid environment variable name (printable ASCII without "=")'
    return None


def _port_ref_error(port: int | str) -> str | None:
    if isinstance(port, int):
        return None if 1 <= port <= 65535 else f"{port} is not a port number (1-65535)"
    return _port_name_error(port)


def _probe_errors(probe: Probe, path: str, kind: str, port_names: set[str]) -> list[str]:
    errors = []
    handlers = [h for h in ("exec", "httpGet", "tcpSocket", "grpc") if getattr(probe, _attr(h)) is not None]
    if not handlers:
        errors.append(f"{path}: must specify a handler (exec, httpGet, tcpSocket or grpc)")
    elif len(handlers) > 1:
        errors.append(f"{path}: may not specify more than one handler ({', '.join(handlers)})")
    for field in ("initialDelaySeconds", "timeoutSeconds", "periodSeconds", "successThreshold", "failureThreshold"):
        if getattr(probe, _attr(field)) < 0:
            errors.append(f"{path}.{field}: must be greater than or equal to 0")
    if kind in ("livenessProbe", "startupProbe") and probe.success_threshold != 1:
        errors.append(f"{path}.successThreshold: must be 1 for a {kind}")
    if probe.exec is not None and not probe.exec.command:
        errors.append(f"{path}.exec.command: required (a probe's exec needs a command)")
    for field, action in (("httpGet", probe.http_get), ("tcpSocket", probe.tcp_socket)):
        if action is None:
            continue
        if error := _port_ref_error(action.port):
            errors.append(f"{path}.{field}.port: {error}")
        elif isinstance(action.port, str) and not action.port.isdigit() and action.port not in port_names:
            errors.append(f'{path}.{field}.port: no container port named "{action.port}" in this container\'s ports')
    return errors


def _attr(camel: str) -> str:
    return re.sub(r"([A-Z])", lambda m: "_" + m.group(1).lower(), camel)


def _container_errors(c: Container, path: str, *, init: bool, host_network: bool, volumes: set[str]) -> list[str]:
    errors = []
    if not c.name:
        errors.append(f"{path}.name: required")
    elif error := dns1123_label_error(c.name):
        errors.append(f"{path}.name: {error}")
    if error := image_reference_error(c.image):
        errors.append(f"{path}.image: {error}")
    if c.image_pull_policy not in PULL_POLICIES:
        errors.append(f"{path}.imagePullPolicy: {_one_of(c.image_pull_policy, PULL_POLICIES)}")
    if c.termination_message_policy not in MESSAGE_POLICIES:
        errors.append(f"{path}.terminationMessagePolicy: {_one_of(c.termination_message_policy, MESSAGE_POLICIES)}")
    if init and c.restart_policy not in (None, "Always"):
        errors.append(f'{path}.restartPolicy: unsupported value "{c.restart_policy}" (only "Always", for a sidecar)')
    if not init and c.restart_policy is not None:
        errors.append(f"{path}.restartPolicy: may not be set for a regular container")
    port_names: set[str] = set()
    for j, port in enumerate(c.ports):
        where = f"{path}.ports[{j}]"
        if not 1 <= port.container_port <= 65535:
            errors.append(f"{where}.containerPort: {port.container_port} is not a port number (1-65535)")
        if not 0 <= port.host_port <= 65535:
            errors.append(f"{where}.hostPort: {port.host_port} is not a port number (1-65535)")
        elif host_network and port.host_port != port.container_port:
            errors.append(f"{where}.hostPort: must equal containerPort with hostNetwork")
        if port.protocol not in PROTOCOLS:
            errors.append(f"{where}.protocol: {_one_of(port.protocol, PROTOCOLS)}")
        if port.name:
            if error := _port_name_error(port.name):
                errors.append(f"{where}.name: {error}")
            elif port.name in port_names:
                errors.append(f'{where}.name: duplicate "{port.name}"')
            port_names.add(port.name)
    for k, env in enumerate(c.env):
        if error := _env_name_error(env.name):
            errors.append(f"{path}.env[{k}].name: {error}")
    for k, mount in enumerate(c.volume_mounts):
        if mount.name not in volumes:
            errors.append(f'{path}.volumeMounts[{k}].name: not found (no volume "{mount.name}" in spec.volumes)')
        if not mount.mount_path:
            errors.append(f"{path}.volumeMounts[{k}].mountPath: required")
    for kind in ("livenessProbe", "readinessProbe", "startupProbe"):
        probe = getattr(c, _attr(kind))
        if probe is None:
            continue
        if init and c.restart_policy != "Always":
            errors.append(f"{path}.{kind}: may not be set for an init container (only for a sidecar)")
        else:
            errors.extend(_probe_errors(probe, f"{path}.{kind}", kind, {p.name for p in c.ports if p.name}))
    return errors


def _metadata_errors(pod: Pod) -> list[str]:
    meta, errors = pod.metadata, []
    if not meta.name:
        errors.append("metadata.name: required")
    elif error := dns1123_subdomain_error(meta.name):
        errors.append(f"metadata.name: {error}")
    if meta.namespace and (error := dns1123_label_error(meta.namespace)):
        errors.append(f"metadata.namespace: {error}")
    for key, value in meta.labels.items():
        if error := _qualified_name_error(key):
            errors.append(f"metadata.labels: {error}")
        elif len(value) > 63 or (value and not _QUALIFIED_NAME.fullmatch(value)):
            errors.append(f'metadata.labels: value "{value}" of "{key}" is not a valid label value')
    for key in meta.annotations:
        if error := _qualified_name_error(key.lower()):
            errors.append(f"metadata.annotations: {error}")
    if sum(len(k) + len(v) for k, v in meta.annotations.items()) > 256 * 1024:
        errors.append("metadata.annotations: larger than 256 KiB in total")
    return errors


def validate_pod(pod: Pod) -> list[str]:
    """Every problem of a defaulted pod, in field order; empty when it is valid."""
    spec = pod.spec
    errors = _metadata_errors(pod)
    volumes: set[str] = set()
    for i, volume in enumerate(spec.volumes):
        where = f"spec.volumes[{i}]"
        if error := dns1123_label_error(volume.name):
            errors.append(f"{where}.name: {error}")
        elif volume.name in volumes:
            errors.append(f'{where}.name: duplicate "{volume.name}"')
        volumes.add(volume.name)
        if volume.host_path is not None:
            if not volume.host_path.path:
                errors.append(f"{where}.hostPath.path: required")
            if volume.host_path.type not in HOST_PATH_TYPES:
                errors.append(f"{where}.hostPath.type: {_one_of(volume.host_path.type, HOST_PATH_TYPES[1:])}")
    if not spec.containers:
        errors.append("spec.containers: required (at least one container)")
    names: set[str] = set()
    for field, containers in (("initContainers", spec.init_containers), ("containers", spec.containers)):
        for i, container in enumerate(containers):
            path = f"spec.{field}[{i}]"
            errors.extend(
                _container_errors(
                    container, path, init=field == "initContainers", host_network=spec.host_network, volumes=volumes
                )
            )
            if container.name and container.name in names:
                errors.append(f'{path}.name: duplicate "{container.name}"')
            names.add(container.name)
    if spec.restart_policy not in RESTART_POLICIES:
        errors.append(f"spec.restartPolicy: {_one_of(spec.restart_policy, RESTART_POLICIES)}")
    if spec.dns_policy not in DNS_POLICIES:
        errors.append(f"spec.dnsPolicy: {_one_of(spec.dns_policy, DNS_POLICIES)}")
    if spec.termination_grace_period_seconds is not None and spec.termination_grace_period_seconds < 0:
        errors.append("spec.terminationGracePeriodSeconds: must be greater than or equal to 0")
    if spec.active_deadline_seconds is not None and spec.active_deadline_seconds <= 0:
        errors.append("spec.activeDeadlineSeconds: must be greater than 0")
    for i, toleration in enumerate(spec.tolerations):
        where = f"spec.tolerations[{i}]"
        if toleration.operator not in TOLERATION_OPERATORS:
            errors.append(f"{where}.operator: {_one_of(toleration.operator, TOLERATION_OPERATORS[1:])}")
        elif toleration.operator == "Exists" and toleration.value:
            errors.append(f'{where}.value: must be empty when operator is "Exists"')
        if toleration.effect not in TAINT_EFFECTS:
            errors.append(f"{where}.effect: {_one_of(toleration.effect, TAINT_EFFECTS[1:])}")
    return errors
