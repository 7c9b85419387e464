"""A container's environment, as the Go kubelet's makeEnvironmentVariables builds it:
service links, envFrom, env with $(VAR) expansion and valueFrom. Pure; the pod worker
calls container_env and expand_command before CreateContainer.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from pykubelet.messages.pod import ConfigMapEnvSource, Container, EnvVar, Pod, SecretEnvSource
from pykubelet.pods.downward_api import DownwardApiError, PodFacts, field_ref_value, resource_field_value


class ContainerConfigError(ValueError):
    """The container cannot be configured; str() is the message its waiting state shows
    (reason CreateContainerConfigError), worded as Go words it."""


class EnvObjects(Protocol):
    """The ConfigMaps and Secrets the pod may read (the kubelet's configMap/secret managers)."""

    def config_map(self, namespace: str, name: str) -> Mapping[str, str] | None:
        """The ConfigMap's data (not binaryData), or None when it does not exist."""

    def secret(self, namespace: str, name: str) -> Mapping[str, bytes] | None:
        """The Secret's data, base64-decoded, or None when it does not exist."""


@dataclass(frozen=True)
class ServiceEnv:
    """One Service, as much as Go's envvars.FromServices reads of it."""

    name: str
    namespace: str
    cluster_ip: str
    ports: tuple[tuple[str, int, str], ...]  # (port name, port, protocol)


# --- $(VAR) expansion --------------------------------------------------------------------


def expand(value: str, lookup: Callable[[str], str | None]) -> str:
    """Go's expansion.Expand: `$(NAME)` becomes lookup(NAME), or stays as written when
    that is None; `$$` is one `$`; any other `$`, and an unclosed `$(`, stay as they are."""
    out: list[str] = []
    i, end = 0, len(value)
    while i < end:
        ch = value[i]
        if ch != "$" or i + 1 == end:
            out.append(ch)
            i += 1
            continue
        following = value[i + 1]
        if following == "$":
            out.append("$")
            i += 2
        elif following == "(":
            close = value.find(")", i + 2)
            if close == -1:
                out.append("$(")
                i += 2
            else:
                name = value[i + 2 : close]
                found = lookup(name)
                out.append(f"$({name})" if found is None else found)
                i = close + 1
        else:
            out.append("$" + following)
            i += 2
    return "".join(out)


def expand_command(container: Container, env: Mapping[str, str]) -> tuple[list[str], list[str]]:
    """The container's command and args with `$(VAR)` expanded against its environment
    (Go's ExpandContainerCommandAndArgs)."""
    return [expand(part, env.get) for part in container.command], [expand(part, env.get) for part in container.args]


def expand_sub_path_expr(expr: str, env: Mapping[str, str]) -> str:
    """A volumeMount's subPathExpr expanded (Go's ExpandContainerVolumeMounts): a variable
    that is unset or empty is an error, not left as written."""
    missing: set[str] = set()

    def lookup(name: str) -> str:
        if not env.get(name):
            missing.add(name)
        return env.get(name, "")

    expanded = expand(expr, lookup)
    if missing:
        raise ContainerConfigError(f"missing value for {', '.join(sorted(missing))}")
    return expanded


# --- service links -----------------------------------------------------------------------

_MASTER_SERVICES = frozenset({"kubernetes"})


def service_env(
    namespace: str, services: Sequence[ServiceEnv], *, enable_service_links: bool,
    master_service_namespace: str = "default",
) -> dict[str, str]:
    """Go's getServiceEnvVarMap: the `kubernetes` Service of the master namespace always,
    the pod's namespace's Services when service links are on (a namesake there wins)."""
    chosen: dict[str, ServiceEnv] = {}
    for service in services:
        if service.cluster_ip in ("", "None"):  # headless or without an IP: no link
            continue
        if service.namespace == master_service_namespace and service.name in _MASTER_SERVICES:
            chosen.setdefault(service.name, service)
        elif service.namespace == namespace and enable_service_links:
            chosen[service.name] = service
    env: dict[str, str] = {}
    for name in sorted(chosen):  # Go's order is a map's; sorting makes ours stable
        env.update(_service_vars(chosen[name]))
    return env


def _service_vars(service: ServiceEnv) -> list[tuple[str, str]]:
    """Go's envvars.FromServices for one Service: FOO_SERVICE_HOST, FOO_SERVICE_PORT and
    one per named port, then the Docker link variables FOO_PORT, FOO_PORT_80_TCP_*."""
    prefix, ip = _env_name(service.name), service.cluster_ip
    if not service.ports:
        return [(f"{prefix}_SERVICE_HOST", ip)]
    out = [(f"{prefix}_SERVICE_HOST", ip), (f"{prefix}_SERVICE_PORT", str(service.ports[0][1]))]
    out += [(f"{prefix}_SERVICE_PORT_{_env_name(name)}", str(port)) for name, port, _ in service.ports if name]
    for index, (_, port, protocol) in enumerate(service.ports):
        protocol = protocol or "TCP"
        url = f"{protocol.lower()}://{ip}:{port}"
        if index == 0:
            out.append((f"{prefix}_PORT", url))
        port_prefix = f"{prefix}_PORT_{port}_{protocol.upper()}"
        out += [(port_prefix, url), (f"{port_prefix}_PROTO", protocol.lower()),
                (f"{port_prefix}_PORT", str(port)), (f"{port_prefix}_ADDR", ip)]
    return out


def _env_name(name: str) -> str:
    return name.replace("-", "_").upper()


# --- the container's environment ---------------------------------------------------------


def container_env(
    pod: Pod,
    container: Container,
    *,
    facts: PodFacts,
    objects: EnvObjects,
    services: Sequence[ServiceEnv],
    master_service_namespace: str = "default",
) -> list[tuple[str, str]]:
    """The container's environment as (name, value) pairs, each name once.

    As Go: envFrom sources in order (a later key wins), then env in order (it overrides
    envFrom; `$(VAR)` in a value sees the variables defined so far, then the service
    links); then the service-link variables the container did not define. Go emits the
    container's own variables in map order; here a name keeps the place it was first set.
    Raises ContainerConfigError for a missing ConfigMap, Secret or key not marked optional,
    or a fieldRef/resourceFieldRef the downward API rejects.
    """
    namespace = pod.metadata.namespace
    links = service_env(namespace, services, enable_service_links=pod.spec.enable_service_links is not False,
                        master_service_namespace=master_service_namespace)
    sources = _Sources(namespace, objects)
    env: dict[str, str] = {}
    for source in container.env_from:
        for key, value in sources.env_from(source.config_map_ref, source.secret_ref):
            env[source.prefix + key] = value

    def lookup(name: str) -> str | None:
        return env[name] if name in env else links.get(name)

    for var in container.env:
        if var.value or var.value_from is None:
            env[var.name] = expand(var.value, lookup)
            continue
        value = _value_from(var, pod, container, facts, sources)
        if value is not None:  # None: an optional source is missing, the name stays unset
            env[var.name] = value
    return [*env.items(), *((name, value) for name, value in links.items() if name not in env)]


def _value_from(var: EnvVar, pod: Pod, container: Container, facts: PodFacts, sources: _Sources) -> str | None:
    source = var.value_from
    assert source is not None
    try:
        if (field := source.field_ref) is not None:
            return field_ref_value(pod, field.field_path, facts, api_version=field.api_version)
        if (resource := source.resource_field_ref) is not None:
            target = resource.container_name or container.name
            return resource_field_value(pod, target, resource.resource, resource.divisor, facts)
    except DownwardApiError as err:
        raise ContainerConfigError(str(err)) from err
    if (config_map := source.config_map_key_ref) is not None:
        return sources.config_map_key(config_map.name, config_map.key, optional=bool(config_map.optional))
    if (secret := source.secret_key_ref) is not None:
        return sources.secret_key(secret.name, secret.key, optional=bool(secret.optional))
    return ""  # fileKeyRef is not implemented (pods/unsupported.py); Go without EnvFiles sets ""


class _Sources:
    """The ConfigMaps and Secrets read while building one environment: each read once, so
    every reference sees the same version, as Go's per-call maps do."""

    def __init__(self, namespace: str, objects: EnvObjects) -> None:
        self.namespace = namespace
        self.objects = objects
        self.config_maps: dict[str, Mapping[str, str]] = {}
        self.secrets: dict[str, Mapping[str, str]] = {}

    def config_map(self, name: str, *, optional: bool) -> Mapping[str, str] | None:
        if name not in self.config_maps:
            data = self.objects.config_map(self.namespace, name)
            if data is None:
                if optional:
                    return None
                raise ContainerConfigError(f'configmap "{name}" not found')
            self.config_maps[name] = data
        return self.config_maps[name]

    def secret(self, name: str, *, optional: bool) -> Mapping[str, str] | None:
        if name not in self.secrets:
            data = self.objects.secret(self.namespace, name)
            if data is None:
                if optional:
                    return None
                raise ContainerConfigError(f'secret "{name}" not found')
            # Go passes the bytes through; a CRI string must be UTF-8, so bytes that are
            # not become U+FFFD rather than fail the container.
            self.secrets[name] = {key: value.decode("utf-8", "replace") for key, value in data.items()}
        return self.secrets[name]

    def env_from(
        self, config_map_ref: ConfigMapEnvSource | None, secret_ref: SecretEnvSource | None
    ) -> list[tuple[str, str]]:
        if config_map_ref is not None:
            data = self.config_map(config_map_ref.name, optional=bool(config_map_ref.optional))
        elif secret_ref is not None:
            data = self.secret(secret_ref.name, optional=bool(secret_ref.optional))
        else:
            data = None
        return sorted(data.items()) if data else []

    def config_map_key(self, name: str, key: str, *, optional: bool) -> str | None:
        data = self.config_map(name, optional=optional)
        if data is None:
            return None
        if key not in data:
            if optional:
                return None
            raise ContainerConfigError(f"couldn't find key {key} in ConfigMap {self.namespace}/{name}")
        return data[key]

    def secret_key(self, name: str, key: str, *, optional: bool) -> str | None:
        data = self.secret(name, optional=optional)
        if data is None:
            return None
        if key not in data:
            if optional:
                return None
            raise ContainerConfigError(f"couldn't find key {key} in Secret {self.namespace}/{name}")
        return data[key]
