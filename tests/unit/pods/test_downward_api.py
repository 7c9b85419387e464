"""The downward API as the Go kubelet renders it: fieldRef values (fieldpath.FormatMap for
whole maps) and resourceFieldRef values (ceil(value / divisor), unset limits read as the
node's allocatable)."""

from __future__ import annotations

import re

import msgspec
import pytest

from pykubelet.messages.pod import Pod
from pykubelet.pods.downward_api import DownwardApiError, PodFacts, field_ref_value, format_map, resource_field_value

FACTS = PodFacts(
    node_name="node-a",
    host_ip="10.0.0.5",
    host_ips=("10.0.0.5", "fd00::5"),
    pod_ips=("10.244.1.7", "fd00:244::7"),
    node_allocatable={"cpu": "2", "memory": "8Gi", "ephemeral-storage": "100Gi"},
)


def pod(containers: list[dict] | None = None, init: list[dict] | None = None) -> Pod:
    return msgspec.convert({
        "metadata": {"name": "web", "namespace": "shop", "uid": "uid-1",
                     "labels": {"app": "web", "tier": "front"},
                     "annotations": {"example.com/owner": "team-a"}},
        "spec": {"nodeName": "node-a", "serviceAccountName": "builder",
                 "containers": containers or [{"name": "c", "image": "busybox"}],
                 "initContainers": init or []},
    }, Pod)


# --- fieldRef ----------------------------------------------------------------------------


@pytest.mark.parametrize(("path", "want"), [
    pytest.param("metadata.name", "web", id="name"),
    pytest.param("metadata.namespace", "shop", id="namespace"),
    pytest.param("metadata.uid", "uid-1", id="uid"),
    pytest.param("spec.nodeName", "node-a", id="node_name"),
    pytest.param("spec.host", "node-a", id="spec_host_is_the_old_name_of_node_name"),
    pytest.param("spec.serviceAccountName", "builder", id="service_account"),
    pytest.param("status.hostIP", "10.0.0.5", id="host_ip"),
    pytest.param("status.hostIPs", "10.0.0.5,fd00::5", id="host_ips_comma_joined"),
    pytest.param("status.podIP", "10.244.1.7", id="pod_ip_is_the_first_pod_ip"),
    pytest.param("status.podIPs", "10.244.1.7,fd00:244::7", id="pod_ips_comma_joined"),
    pytest.param("metadata.labels['app']", "web", id="one_label"),
    pytest.param("metadata.labels['missing']", "", id="missing_label_is_empty"),
    pytest.param("metadata.annotations['example.com/owner']", "team-a", id="one_annotation_with_prefix"),
    pytest.param("metadata.labels", 'app="web"\ntier="front"', id="all_labels_sorted_and_quoted"),
])
def test_field_ref_values(path: str, want: str) -> None:
    assert field_ref_value(pod(), path, FACTS) == want


def test_pod_ip_is_empty_before_the_sandbox_has_one() -> None:
    facts = PodFacts(node_name="node-a", host_ip="10.0.0.5")
    assert (field_ref_value(pod(), "status.podIP", facts), field_ref_value(pod(), "status.podIPs", facts)) == ("", "")


def test_host_ips_fall_back_to_the_host_ip() -> None:
    assert field_ref_value(pod(), "status.hostIPs", PodFacts(node_name="n", host_ip="10.0.0.5")) == "10.0.0.5"


@pytest.mark.parametrize(("values", "want"), [
    pytest.param({}, "", id="empty_map_is_empty_string"),
    pytest.param({"b": "2", "a": "1"}, 'a="1"\nb="2"', id="keys_sorted_no_trailing_newline"),
    pytest.param({"k": 'say "hi"\\'}, r'k="say \"hi\"\\"', id="quotes_and_backslashes_escaped"),
    pytest.param({"k": "a\nb\tc"}, r'k="a\nb\tc"', id="newline_and_tab_escaped"),
    pytest.param({"k": "\x01\x7f"}, r'k="\x01\x7f"', id="control_bytes_as_hex"),
    pytest.param({"k": "café ☕"}, 'k="café ☕"', id="printable_unicode_kept"),
    pytest.param({"k": "\u00a0\u200b"}, r'k="\u00a0\u200b"', id="unprintable_unicode_as_u_escape"),
])
def test_format_map_is_go_fieldpath_format_map(values: dict[str, str], want: str) -> None:
    assert format_map(values) == want


@pytest.mark.parametrize(("path", "message"), [
    pytest.param("spec.containers", "field label not supported: spec.containers", id="unknown_field"),
    pytest.param("status.phase", "unsupported fieldPath: status.phase", id="accepted_label_kubelet_cannot_render"),
    pytest.param("spec.nodeName['x']", "field label does not support subscript: spec.nodeName['x']",
                 id="subscript_on_a_plain_field"),
    pytest.param("metadata.labels['a/b/c']", "invalid key subscript in metadata.labels['a/b/c']",
                 id="subscript_with_two_slashes"),
    pytest.param("metadata.labels['']", "invalid key subscript in metadata.labels['']: name part must be non-empty",
                 id="empty_subscript"),
])
def test_unsupported_field_paths_name_the_path(path: str, message: str) -> None:
    with pytest.raises(DownwardApiError, match="^" + re.escape(message)):
        field_ref_value(pod(), path, FACTS)


def test_annotation_subscript_is_validated_lowercased() -> None:
    # Go lowercases annotation keys before validating (a prefix must be a lowercase DNS
    # name), but not label keys.
    assert field_ref_value(pod(), "metadata.annotations['Example.COM/owner']", FACTS) == ""
    with pytest.raises(DownwardApiError, match="prefix part"):
        field_ref_value(pod(), "metadata.labels['Example.COM/owner']", FACTS)


def test_api_version_other_than_v1_is_rejected() -> None:
    with pytest.raises(DownwardApiError, match="^unsupported pod version: v2$"):
        field_ref_value(pod(), "metadata.name", FACTS, api_version="v2")


# --- resourceFieldRef --------------------------------------------------------------------


def resources(limits: dict | None = None, requests: dict | None = None) -> list[dict]:
    return [{"name": "c", "image": "busybox", "resources": {"limits": limits or {}, "requests": requests or {}}}]


@pytest.mark.parametrize(("spec", "resource", "divisor", "want"), [
    pytest.param(resources({"cpu": "250m"}), "limits.cpu", None, "1", id="cpu_rounds_up_to_whole_cores"),
    pytest.param(resources({"cpu": "250m"}), "limits.cpu", "1m", "250", id="cpu_in_millicores"),
    pytest.param(resources({"cpu": "1.5"}), "limits.cpu", "1", "2", id="fractional_cores_round_up"),
    pytest.param(resources({"cpu": "3"}), "limits.cpu", "0", "3", id="zero_divisor_means_one"),
    pytest.param(resources(requests={"cpu": "100m"}), "requests.cpu", "1m", "100", id="cpu_request"),
    pytest.param(resources(), "requests.cpu", None, "0", id="unset_cpu_request_is_zero"),
    pytest.param(resources(), "requests.memory", None, "0", id="unset_memory_request_is_zero"),
    pytest.param(resources({"memory": "64Mi"}), "limits.memory", "1Mi", "64", id="memory_in_mebibytes"),
    pytest.param(resources({"memory": "64Mi"}), "limits.memory", None, str(64 * 2**20), id="memory_in_bytes"),
    pytest.param(resources({"memory": "1500Ki"}), "limits.memory", "1Mi", "2", id="memory_rounds_up"),
    pytest.param(resources({"memory": "1G"}), "limits.memory", 1000, "1000000", id="integer_divisor"),
    pytest.param(resources(requests={"ephemeral-storage": "2Gi"}), "requests.ephemeral-storage", "1Gi", "2",
                 id="ephemeral_storage_request"),
    pytest.param(resources(), "limits.cpu", None, "2", id="unset_cpu_limit_is_node_allocatable"),
    pytest.param(resources(), "limits.memory", "1Gi", "8", id="unset_memory_limit_is_node_allocatable"),
    pytest.param(resources(), "limits.ephemeral-storage", "1Gi", "100", id="unset_storage_limit_is_node_allocatable"),
    pytest.param(resources({"cpu": "0"}), "limits.cpu", None, "2", id="zero_limit_is_node_allocatable"),
    pytest.param(resources({"hugepages-2Mi": "4Mi"}), "limits.hugepages-2Mi", "1Mi", "4", id="hugepages_limit"),
    pytest.param(resources(), "limits.hugepages-2Mi", None, "0", id="unset_hugepages_limit_is_zero_not_allocatable"),
])
def test_resource_field_values(spec: list[dict], resource: str, divisor, want: str) -> None:
    assert resource_field_value(pod(spec), "c", resource, divisor, FACTS) == want


def test_unset_limit_without_allocatable_is_zero() -> None:
    facts = PodFacts(node_name="n", host_ip="10.0.0.5")
    assert resource_field_value(pod(resources()), "c", "limits.cpu", None, facts) == "0"


def test_init_container_is_found_by_name() -> None:
    init = [{"name": "setup", "image": "busybox", "resources": {"limits": {"memory": "32Mi"}}}]
    assert resource_field_value(pod(init=init), "setup", "limits.memory", "1Mi", FACTS) == "32"


@pytest.mark.parametrize(("container", "resource", "message"), [
    pytest.param("c", "limits.gpu", "unsupported container resource : limits.gpu", id="unknown_resource"),
    pytest.param("c", "cpu", "unsupported container resource : cpu", id="resource_without_limits_or_requests"),
    pytest.param("ghost", "limits.cpu", "container ghost not found", id="unknown_container"),
])
def test_resource_errors_name_the_resource_or_container(container: str, resource: str, message: str) -> None:
    with pytest.raises(DownwardApiError, match="^" + re.escape(message) + "$"):
        resource_field_value(pod(), container, resource, None, FACTS)
