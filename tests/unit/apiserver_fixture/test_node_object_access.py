"""What a node identity may read of ConfigMaps, Secrets, Services and ServiceAccounts, as
the v1.36 Node authorizer decides it: an object a pod bound to the node references (get,
and list/watch of that one object by name), every Service, nothing else."""

from __future__ import annotations

import pytest

from tests.support.apiserver import objects
from tests.unit.apiserver_fixture.helpers import forbidden_message, run_pod
from tests.support.apiserver.objects import watch_events

NS = "/api/v1/namespaces/default"
MERGE = {"Content-Type": "application/merge-patch+json"}




def _container(name: str = "main", **fields) -> list[dict]:
    return [{"name": name, "image": "busybox:1.36", **fields}]


REFERENCES = {
    "secret volume": ("secrets", {"volumes": [{"name": "v", "secret": {"secretName": "ref"}}]}),
    "projected secret": ("secrets", {"volumes": [{"name": "v", "projected": {"sources": [{"secret": {"name": "ref"}}]}}]}),
    "secretKeyRef": ("secrets", {"containers": _container(env=[{"name": "E", "valueFrom": {"secretKeyRef": {"name": "ref", "key": "k"}}}])}),
    "envFrom secretRef": ("secrets", {"initContainers": _container("init", envFrom=[{"secretRef": {"name": "ref"}}])}),
    "imagePullSecrets": ("secrets", {"imagePullSecrets": [{"name": "ref"}]}),
    "configMap volume": ("configmaps", {"volumes": [{"name": "v", "configMap": {"name": "ref"}}]}),
    "projected configMap": ("configmaps", {"volumes": [{"name": "v", "projected": {"sources": [{"configMap": {"name": "ref"}}]}}]}),
    "configMapKeyRef": ("configmaps", {"containers": _container(env=[{"name": "E", "valueFrom": {"configMapKeyRef": {"name": "ref", "key": "k"}}}])}),
    "envFrom configMapRef": ("configmaps", {"containers": _container(envFrom=[{"configMapRef": {"name": "ref"}}])}),
}


@pytest.mark.parametrize("how", list(REFERENCES))
def test_node_may_get_an_object_a_pod_bound_to_it_references(apiserver, node1, how):
    resource, spec = REFERENCES[how]
    body = objects.secret("ref", {"k": b"v"}) if resource == "secrets" else objects.configmap("ref", {"k": "v"})
    apiserver.admin.post(f"{NS}/{resource}", json=body)
    assert "no relationship found between node 'node1' and this object" in forbidden_message(node1.get(f"{NS}/{resource}/ref"))
    run_pod(apiserver, "web", **spec)
    got = node1.get(f"{NS}/{resource}/ref")
    assert got.status_code == 200, got.text
    assert got.json()["metadata"]["name"] == "ref"


def test_node_may_not_get_an_unreferenced_secret_or_one_of_another_nodes_pod(apiserver, node1):
    for name in ("mine", "theirs", "nobodys"):
        apiserver.admin.post(f"{NS}/secrets", json=objects.secret(name, {"k": b"v"}))
    run_pod(apiserver, "web", volumes=[{"name": "v", "secret": {"secretName": "mine"}}])
    run_pod(apiserver, "elsewhere", "node2", volumes=[{"name": "v", "secret": {"secretName": "theirs"}}])
    assert node1.get(f"{NS}/secrets/mine").status_code == 200
    for name in ("theirs", "nobodys"):
        assert forbidden_message(node1.get(f"{NS}/secrets/{name}")) == (
            f'secrets "{name}" is forbidden: User "system:node:node1" cannot get resource "secrets" in API group "" '
            "in the namespace \"default\": no relationship found between node 'node1' and this object")


def test_a_referenced_but_missing_secret_is_404_not_403(apiserver, node1):
    run_pod(apiserver, "web", volumes=[{"name": "v", "secret": {"secretName": "later"}}])
    assert node1.get(f"{NS}/secrets/later").status_code == 404


def test_a_mirror_pod_grants_its_node_nothing(apiserver, node1):
    apiserver.admin.post(f"{NS}/secrets", json=objects.secret("ref", {"k": b"v"}))
    mirror = objects.mirror_pod("static-web-node1", "node1")
    mirror["spec"]["volumes"] = [{"name": "v", "secret": {"secretName": "ref"}}]
    assert apiserver.admin.post(f"{NS}/pods", json=mirror).status_code == 201
    forbidden_message(node1.get(f"{NS}/secrets/ref"))


def test_deleting_the_pod_takes_the_access_away(apiserver, node1):
    apiserver.admin.post(f"{NS}/configmaps", json=objects.configmap("ref", {"k": "v"}))
    run_pod(apiserver, "web", volumes=[{"name": "v", "configMap": {"name": "ref"}}])
    assert node1.get(f"{NS}/configmaps/ref").status_code == 200
    apiserver.admin.delete(f"{NS}/pods/web", params={"gracePeriodSeconds": "0"})
    forbidden_message(node1.get(f"{NS}/configmaps/ref"))


@pytest.mark.parametrize("resource", ["secrets", "configmaps"])
def test_list_or_watch_without_a_name_selector_is_403(apiserver, node1, resource):
    run_pod(apiserver, "web", volumes=[{"name": "v", "secret": {"secretName": "ref"}}, {"name": "c", "configMap": {"name": "ref"}}])
    assert forbidden_message(node1.get(f"{NS}/{resource}")) == (
        f'{resource} is forbidden: User "system:node:node1" cannot list resource "{resource}" in API group "" '
        'in the namespace "default": No Object name found')
    forbidden_message(node1.get(f"{NS}/{resource}", params={"watch": "1"}))
    cluster_wide = forbidden_message(node1.get(f"/api/v1/{resource}", params={"fieldSelector": "metadata.name=ref"}))
    assert cluster_wide.endswith("at the cluster scope: can only read namespaced object of this type")
    other = forbidden_message(node1.get(f"{NS}/{resource}", params={"fieldSelector": "metadata.name=other"}))
    assert other.startswith(f'{resource} "other" is forbidden:') and "no relationship found" in other
    listed = node1.get(f"{NS}/{resource}", params={"fieldSelector": "metadata.name=ref"})
    assert listed.status_code == 200 and listed.json()["items"] == []


def test_watch_by_name_of_a_referenced_secret_sees_its_update(apiserver, node1):
    apiserver.admin.post(f"{NS}/secrets", json=objects.secret("ref", {"k": b"v1"}))
    run_pod(apiserver, "web", volumes=[{"name": "v", "secret": {"secretName": "ref"}}])
    one = {"fieldSelector": "metadata.name=ref"}
    listed = node1.get(f"{NS}/secrets", params=one)
    assert listed.status_code == 200, listed.text
    assert [s["metadata"]["name"] for s in listed.json()["items"]] == ["ref"]
    rv = listed.json()["metadata"]["resourceVersion"]
    with node1.stream("GET", f"{NS}/secrets", params={**one, "watch": "1", "resourceVersion": rv}) as response:
        assert response.status_code == 200
        events = watch_events(response)
        apiserver.admin.patch(f"{NS}/secrets/ref", json={"data": {"k": "djI="}}, headers=MERGE)
        event = next(events)
    assert (event["type"], event["object"]["metadata"]["name"], event["object"]["data"]) == ("MODIFIED", "ref", {"k": "djI="})


def test_node_may_not_write_configmaps_or_secrets(apiserver, node1):
    run_pod(apiserver, "web", volumes=[{"name": "v", "configMap": {"name": "ref"}}])
    message = forbidden_message(node1.post(f"{NS}/configmaps", json=objects.configmap("ref", {"k": "v"})))
    assert message.endswith(": can only read resources of this type")
    apiserver.admin.post(f"{NS}/configmaps", json=objects.configmap("ref", {"k": "v"}))
    forbidden_message(node1.patch(f"{NS}/configmaps/ref", json={"data": {"k": "w"}}, headers=MERGE))
    forbidden_message(node1.delete(f"{NS}/configmaps/ref"))


def test_node_reads_every_service_but_writes_none(apiserver, node1):
    apiserver.admin.post(f"{NS}/services", json=objects.service("web"))
    assert node1.get(f"{NS}/services/web").status_code == 200
    assert node1.get(f"{NS}/services/kubernetes").status_code == 200
    assert {s["metadata"]["name"] for s in node1.get("/api/v1/services").json()["items"]} == {"kubernetes", "web"}
    with node1.stream("GET", "/api/v1/services", params={"watch": "1"}) as response:
        assert response.status_code == 200
        assert next(watch_events(response))["type"] == "ADDED"
    forbidden_message(node1.post(f"{NS}/services", json=objects.service("mine")))
    forbidden_message(node1.delete(f"{NS}/services/web"))


def test_node_gets_only_the_service_accounts_of_its_pods_and_lists_none(apiserver, node1):
    apiserver.admin.post(f"{NS}/serviceaccounts", json=objects.serviceaccount("robot"))
    apiserver.admin.post(f"{NS}/serviceaccounts", json=objects.serviceaccount("other"))
    run_pod(apiserver, "web", serviceAccountName="robot")
    run_pod(apiserver, "elsewhere", "node2", serviceAccountName="other")
    assert node1.get(f"{NS}/serviceaccounts/robot").status_code == 200
    assert "no relationship found" in forbidden_message(node1.get(f"{NS}/serviceaccounts/other"))
    listed = forbidden_message(node1.get(f"{NS}/serviceaccounts", params={"fieldSelector": "metadata.name=robot"}))
    assert listed.endswith(": can only create tokens for individual service accounts")
