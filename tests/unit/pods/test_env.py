"""A container's environment as Go's makeEnvironmentVariables builds it: envFrom, env with
$(VAR) expansion and valueFrom, service-link variables, and Go's error wording."""

from __future__ import annotations

from collections.abc import Mapping

import msgspec
import pytest

from pykubelet.messages.pod import Container, Pod
from pykubelet.pods.downward_api import PodFacts
from pykubelet.pods.env import (
    ContainerConfigError,
    ServiceEnv,
    container_env,
    expand,
    expand_command,
    expand_sub_path_expr,
    service_env,
)

FACTS = PodFacts(node_name="node-a", host_ip="10.0.0.5", pod_ips=("10.244.1.7",),
                 node_allocatable={"cpu": "4", "memory": "8Gi"})
KUBERNETES = ServiceEnv("kubernetes", "default", "10.96.0.1", (("https", 443, "TCP"),))


class Objects:
    """ConfigMaps and Secrets keyed by (namespace, name); counts reads."""

    def __init__(self, config_maps: dict | None = None, secrets: dict | None = None) -> None:
        self.config_maps = config_maps or {}
        self.secrets = secrets or {}
        self.reads: list[str] = []

    def config_map(self, namespace: str, name: str) -> Mapping[str, str] | None:
        self.reads.append(f"configmap {namespace}/{name}")
        return self.config_maps.get((namespace, name))

    def secret(self, namespace: str, name: str) -> Mapping[str, bytes] | None:
        self.reads.append(f"secret {namespace}/{name}")
        return self.secrets.get((namespace, name))


CFG = {("default", "cfg"): {"db": "postgres", "HOST": "db.local"}}
SECRET = {("default", "s"): {"password": b"hunter2"}}


def make_pod(env: list | None = None, env_from: list | None = None, *, links: bool | None = None,
             namespace: str = "default", resources: dict | None = None) -> Pod:
    container = {"name": "app", "image": "busybox", "env": env or [], "envFrom": env_from or []}
    if resources:
        container["resources"] = resources
    spec: dict = {"containers": [container]}
    if links is not None:
        spec["enableServiceLinks"] = links
    return msgspec.convert({"metadata": {"name": "web", "namespace": namespace, "uid": "u1"}, "spec": spec}, Pod)


def env_of(pod: Pod, objects: Objects | None = None, services: tuple[ServiceEnv, ...] = ()) -> list[tuple[str, str]]:
    return container_env(pod, pod.spec.containers[0], facts=FACTS, objects=objects or Objects(), services=services)


def config_error(pod: Pod, objects: Objects) -> str:
    with pytest.raises(ContainerConfigError) as caught:
        env_of(pod, objects)
    return str(caught.value)


# --- expansion ---------------------------------------------------------------------------

VARS = {"A": "alpha", "B": "beta", "EMPTY": ""}


@pytest.mark.parametrize(("text", "want"), [
    pytest.param("$(A)", "alpha", id="reference_replaced"),
    pytest.param("x-$(A)-$(B)-y", "x-alpha-beta-y", id="several_references"),
    pytest.param("$(NOPE)", "$(NOPE)", id="undefined_reference_kept_literally"),
    pytest.param("[$(EMPTY)]", "[]", id="defined_empty_reference_is_empty"),
    pytest.param("$$(A)", "$(A)", id="dollar_dollar_escapes_a_reference"),
    pytest.param("cost: $$5", "cost: $5", id="dollar_dollar_is_one_dollar"),
    pytest.param("$$$(A)", "$alpha", id="escaped_dollar_then_reference"),
    pytest.param("$(A", "$(A", id="unterminated_reference_kept"),
    pytest.param("$(A$(B)", "$(A$(B)", id="reference_name_runs_to_first_close"),
    pytest.param("$A ${B}", "$A ${B}", id="shell_syntax_untouched"),
    pytest.param("end$", "end$", id="trailing_dollar_kept"),
    pytest.param("$()", "$()", id="empty_name_undefined"),
    pytest.param("", "", id="empty_string"),
])
def test_expand(text: str, want: str) -> None:
    assert expand(text, VARS.get) == want


def test_expand_command_expands_command_and_args() -> None:
    container = Container(name="c", command=["sh", "-c", "echo $(A)"], args=["$(B)", "$(C)", "$$(A)"])
    assert expand_command(container, VARS) == (["sh", "-c", "echo alpha"], ["beta", "$(C)", "$(A)"])


def test_sub_path_expr_expands_and_names_missing_or_empty_variables() -> None:
    assert expand_sub_path_expr("logs/$(A)", VARS) == "logs/alpha"
    with pytest.raises(ContainerConfigError, match=r"^missing value for EMPTY, NOPE$"):
        expand_sub_path_expr("$(NOPE)/$(EMPTY)/$(A)", VARS)


# --- env and envFrom ---------------------------------------------------------------------


def test_plain_values_in_declaration_order() -> None:
    pod = make_pod([{"name": "B", "value": "2"}, {"name": "A", "value": "1"}, {"name": "E"}])
    assert env_of(pod) == [("B", "2"), ("A", "1"), ("E", "")]


def test_reference_sees_variables_defined_before_it_only() -> None:
    pod = make_pod([{"name": "URL", "value": "http://$(HOST):$(PORT)"}, {"name": "HOST", "value": "h"},
                    {"name": "GREETING", "value": "at $(HOST)"}])
    assert dict(env_of(pod)) == {"URL": "http://$(HOST):$(PORT)", "HOST": "h", "GREETING": "at h"}


def test_reference_to_itself_uses_the_earlier_value() -> None:
    pod = make_pod([{"name": "PATH", "value": "/bin"}, {"name": "PATH", "value": "$(PATH):/opt/bin"}])
    assert env_of(pod) == [("PATH", "/bin:/opt/bin")]


def test_env_from_config_map_with_prefix() -> None:
    pod = make_pod(env_from=[{"prefix": "APP_", "configMapRef": {"name": "cfg"}}])
    assert env_of(pod, Objects(CFG)) == [("APP_HOST", "db.local"), ("APP_db", "postgres")]


def test_env_from_secret_is_decoded() -> None:
    pod = make_pod(env_from=[{"secretRef": {"name": "s"}}])
    assert env_of(pod, Objects(secrets=SECRET)) == [("password", "hunter2")]


def test_later_env_from_source_wins() -> None:
    objects = Objects({("default", "a"): {"K": "from-a", "ONLY_A": "1"}, ("default", "b"): {"K": "from-b"}})
    pod = make_pod(env_from=[{"configMapRef": {"name": "a"}}, {"configMapRef": {"name": "b"}}])
    assert env_of(pod, objects) == [("K", "from-b"), ("ONLY_A", "1")]


def test_env_overrides_env_from_and_keeps_its_place() -> None:
    pod = make_pod([{"name": "HOST", "value": "override"}], env_from=[{"configMapRef": {"name": "cfg"}}])
    assert env_of(pod, Objects(CFG)) == [("HOST", "override"), ("db", "postgres")]


def test_env_value_can_reference_env_from_variables() -> None:
    pod = make_pod([{"name": "DSN", "value": "$(db)://$(HOST)"}], env_from=[{"configMapRef": {"name": "cfg"}}])
    assert dict(env_of(pod, Objects(CFG)))["DSN"] == "postgres://db.local"


def test_config_map_key_ref() -> None:
    pod = make_pod([{"name": "DB", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "db"}}}])
    assert env_of(pod, Objects(CFG)) == [("DB", "postgres")]


def test_secret_key_ref() -> None:
    pod = make_pod([{"name": "PW", "valueFrom": {"secretKeyRef": {"name": "s", "key": "password"}}}])
    assert env_of(pod, Objects(secrets=SECRET)) == [("PW", "hunter2")]


def test_value_from_is_not_expanded() -> None:
    objects = Objects({("default", "cfg"): {"raw": "$(A)"}})
    pod = make_pod([{"name": "A", "value": "a"},
                    {"name": "R", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "raw"}}}])
    assert dict(env_of(pod, objects))["R"] == "$(A)"


def test_secret_bytes_that_are_not_utf8_become_replacement_characters() -> None:
    objects = Objects(secrets={("default", "bin"): {"k": b"\xffok"}})
    pod = make_pod(env_from=[{"secretRef": {"name": "bin"}}])
    assert env_of(pod, objects) == [("k", "\ufffdok")]


def test_each_object_is_read_once() -> None:
    objects = Objects(CFG)
    pod = make_pod([{"name": "X", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "db"}}},
                    {"name": "Y", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "HOST"}}}],
                   env_from=[{"configMapRef": {"name": "cfg"}}])
    env_of(pod, objects)
    assert objects.reads == ["configmap default/cfg"]


# --- missing objects and keys ------------------------------------------------------------


@pytest.mark.parametrize(("env", "env_from", "message"), [
    pytest.param([], [{"configMapRef": {"name": "cfg"}}], 'configmap "cfg" not found', id="env_from_config_map"),
    pytest.param([], [{"secretRef": {"name": "s"}}], 'secret "s" not found', id="env_from_secret"),
    pytest.param([{"name": "X", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "db"}}}], [],
                 'configmap "cfg" not found', id="config_map_key_ref"),
    pytest.param([{"name": "X", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}], [],
                 'secret "s" not found', id="secret_key_ref"),
])
def test_missing_object_names_it(env: list, env_from: list, message: str) -> None:
    assert config_error(make_pod(env, env_from), Objects()) == message


def test_missing_configmap_key_names_object_and_key() -> None:
    pod = make_pod([{"name": "X", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "nope"}}}])
    assert config_error(pod, Objects(CFG)) == "couldn't find key nope in ConfigMap default/cfg"


def test_missing_secret_key_names_object_and_key() -> None:
    pod = make_pod([{"name": "X", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}])
    assert config_error(pod, Objects(secrets=SECRET)) == "couldn't find key k in Secret default/s"


@pytest.mark.parametrize(("env", "env_from"), [
    pytest.param([], [{"configMapRef": {"name": "cfg", "optional": True}}], id="env_from_config_map"),
    pytest.param([], [{"secretRef": {"name": "s", "optional": True}}], id="env_from_secret"),
    pytest.param([{"name": "X", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "k", "optional": True}}}], [],
                 id="config_map_key_ref"),
    pytest.param([{"name": "X", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k", "optional": True}}}], [],
                 id="secret_key_ref"),
])
def test_optional_missing_object_sets_nothing(env: list, env_from: list) -> None:
    assert env_of(make_pod(env, env_from), Objects()) == []


def test_optional_secret_missing_sets_nothing() -> None:
    pod = make_pod([{"name": "PW", "valueFrom": {"secretKeyRef": {"name": "s", "key": "password", "optional": True}}},
                    {"name": "AFTER", "value": "$(PW)"}])
    assert env_of(pod, Objects()) == [("AFTER", "$(PW)")]


def test_optional_missing_key_keeps_the_env_from_value() -> None:
    # Go skips the variable ("continue"), so what envFrom set stays.
    ref = {"name": "cfg", "key": "nope", "optional": True}
    pod = make_pod([{"name": "HOST", "valueFrom": {"configMapKeyRef": ref}}],
                   env_from=[{"configMapRef": {"name": "cfg"}}])
    assert dict(env_of(pod, Objects(CFG)))["HOST"] == "db.local"


def test_optional_env_from_then_required_key_ref_still_fails() -> None:
    pod = make_pod([{"name": "X", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "db"}}}],
                   env_from=[{"configMapRef": {"name": "cfg", "optional": True}}])
    assert config_error(pod, Objects()) == 'configmap "cfg" not found'


# --- downward API ------------------------------------------------------------------------


def test_field_ref_values() -> None:
    pod = make_pod([{"name": "NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                    {"name": "IP", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "status.podIP"}}},
                    {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}])
    pod.spec.node_name = "node-a"
    assert env_of(pod) == [("NAME", "web"), ("IP", "10.244.1.7"), ("NODE", "node-a")]


def test_resource_field_ref_defaults_to_its_own_container() -> None:
    pod = make_pod([{"name": "MEM", "valueFrom": {"resourceFieldRef": {"resource": "limits.memory", "divisor": "1Mi"}}},
                    {"name": "CPU", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu"}}}],
                   resources={"limits": {"memory": "256Mi"}})
    assert env_of(pod) == [("MEM", "256"), ("CPU", "4")]  # cpu: no limit, the node's allocatable


def test_downward_api_error_is_a_container_config_error() -> None:
    pod = make_pod([{"name": "X", "valueFrom": {"fieldRef": {"fieldPath": "status.phase"}}}])
    assert config_error(pod, Objects()) == "unsupported fieldPath: status.phase"


# --- service links -----------------------------------------------------------------------

WEB = ServiceEnv("web-api", "default", "10.96.5.5", (("http", 80, "TCP"), ("metrics", 9090, "")))
OTHER_NS = ServiceEnv("db", "other", "10.96.7.7", (("", 5432, "TCP"),))
HEADLESS = ServiceEnv("peers", "default", "None", (("", 7000, "TCP"),))

KUBERNETES_VARS = [
    ("KUBERNETES_SERVICE_HOST", "10.96.0.1"),
    ("KUBERNETES_SERVICE_PORT", "443"),
    ("KUBERNETES_SERVICE_PORT_HTTPS", "443"),
    ("KUBERNETES_PORT", "tcp://10.96.0.1:443"),
    ("KUBERNETES_PORT_443_TCP", "tcp://10.96.0.1:443"),
    ("KUBERNETES_PORT_443_TCP_PROTO", "tcp"),
    ("KUBERNETES_PORT_443_TCP_PORT", "443"),
    ("KUBERNETES_PORT_443_TCP_ADDR", "10.96.0.1"),
]


def test_service_vars_for_a_two_port_service() -> None:
    assert list(service_env("default", [WEB], enable_service_links=True).items()) == [
        ("WEB_API_SERVICE_HOST", "10.96.5.5"),
        ("WEB_API_SERVICE_PORT", "80"),
        ("WEB_API_SERVICE_PORT_HTTP", "80"),
        ("WEB_API_SERVICE_PORT_METRICS", "9090"),
        ("WEB_API_PORT", "tcp://10.96.5.5:80"),
        ("WEB_API_PORT_80_TCP", "tcp://10.96.5.5:80"),
        ("WEB_API_PORT_80_TCP_PROTO", "tcp"),
        ("WEB_API_PORT_80_TCP_PORT", "80"),
        ("WEB_API_PORT_80_TCP_ADDR", "10.96.5.5"),
        ("WEB_API_PORT_9090_TCP", "tcp://10.96.5.5:9090"),
        ("WEB_API_PORT_9090_TCP_PROTO", "tcp"),
        ("WEB_API_PORT_9090_TCP_PORT", "9090"),
        ("WEB_API_PORT_9090_TCP_ADDR", "10.96.5.5"),
    ]


def test_kubernetes_service_vars_even_without_service_links() -> None:
    pod = make_pod(links=False, namespace="shop")
    services = (KUBERNETES, ServiceEnv("web", "shop", "10.96.9.9", (("", 80, "TCP"),)))
    assert env_of(pod, services=services) == KUBERNETES_VARS


def test_service_links_cover_the_pods_namespace_only() -> None:
    names = {name for name, _ in env_of(make_pod(namespace="default"), services=(KUBERNETES, WEB, OTHER_NS))}
    assert "WEB_API_SERVICE_HOST" in names and "KUBERNETES_SERVICE_HOST" in names
    assert not any(name.startswith("DB_") for name in names)


def test_service_links_default_to_on() -> None:
    assert ("WEB_API_SERVICE_HOST", "10.96.5.5") in env_of(make_pod(), services=(WEB,))


def test_headless_service_has_no_vars() -> None:
    assert env_of(make_pod(), services=(HEADLESS,)) == []


def test_kubernetes_service_of_another_namespace_is_not_the_master() -> None:
    fake = ServiceEnv("kubernetes", "other", "10.96.8.8", (("https", 443, "TCP"),))
    assert env_of(make_pod(namespace="shop", links=False), services=(fake,)) == []


def test_namespace_namesake_of_kubernetes_wins_with_service_links() -> None:
    own = ServiceEnv("kubernetes", "shop", "10.96.8.8", (("https", 443, "TCP"),))
    env = dict(env_of(make_pod(namespace="shop"), services=(own, KUBERNETES)))
    assert env["KUBERNETES_SERVICE_HOST"] == "10.96.8.8"


def test_service_vars_come_after_the_containers_own() -> None:
    pod = make_pod([{"name": "A", "value": "1"}])
    assert env_of(pod, services=(KUBERNETES,)) == [("A", "1"), *KUBERNETES_VARS]


def test_container_var_overrides_a_service_var() -> None:
    pod = make_pod([{"name": "KUBERNETES_SERVICE_HOST", "value": "api.local"}])
    env = env_of(pod, services=(KUBERNETES,))
    assert [value for name, value in env if name == "KUBERNETES_SERVICE_HOST"] == ["api.local"]
    assert env[0] == ("KUBERNETES_SERVICE_HOST", "api.local")


def test_env_value_can_reference_service_vars() -> None:
    pod = make_pod([{"name": "API", "value": "https://$(KUBERNETES_SERVICE_HOST):$(KUBERNETES_SERVICE_PORT)"}])
    assert dict(env_of(pod, services=(KUBERNETES,)))["API"] == "https://10.96.0.1:443"


def test_container_var_set_empty_hides_the_service_var_from_references() -> None:
    pod = make_pod([{"name": "KUBERNETES_SERVICE_HOST", "value": ""},
                    {"name": "API", "value": "[$(KUBERNETES_SERVICE_HOST)]"}])
    assert dict(env_of(pod, services=(KUBERNETES,)))["API"] == "[]"
