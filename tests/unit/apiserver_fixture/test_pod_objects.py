"""ConfigMaps, Secrets, Services and ServiceAccounts for system:masters: CRUD with
resourceVersions and watch events, validation as kube-apiserver does it, the objects a
cluster starts with, and the ServiceAccount admission check on pods."""

from __future__ import annotations

import base64

import pytest

from tests.support.apiserver import objects
from tests.support.apiserver.objects import take, watch_events

NS = "/api/v1/namespaces/default"
MERGE = {"Content-Type": "application/merge-patch+json"}


@pytest.mark.parametrize("resource, body", [
    ("configmaps", objects.configmap("cfg", {"a": "1"})),
    ("secrets", objects.secret("s", {"a": b"1"})),
    ("services", objects.service("web")),
    ("serviceaccounts", objects.serviceaccount("robot")),
], ids=["configmaps", "secrets", "services", "serviceaccounts"])
def test_admin_creates_reads_updates_patches_and_deletes(apiserver, resource, body):
    admin = apiserver.admin
    name = body["metadata"]["name"]
    created = admin.post(f"{NS}/{resource}", json=body)
    assert created.status_code == 201, created.text
    stored = created.json()
    assert stored["metadata"]["uid"] and stored["metadata"]["resourceVersion"]
    assert admin.post(f"{NS}/{resource}", json=body).json()["reason"] == "AlreadyExists"
    assert admin.get(f"{NS}/{resource}/{name}").json() == stored
    listed = admin.get(f"{NS}/{resource}").json()
    assert listed["kind"] == body["kind"] + "List" and name in [i["metadata"]["name"] for i in listed["items"]]
    stored["metadata"]["labels"] = {"tier": "one"}
    updated = admin.put(f"{NS}/{resource}/{name}", json=stored)
    assert updated.status_code == 200, updated.text
    assert int(updated.json()["metadata"]["resourceVersion"]) > int(stored["metadata"]["resourceVersion"])
    assert admin.put(f"{NS}/{resource}/{name}", json=stored).status_code == 409  # stale resourceVersion
    patched = admin.patch(f"{NS}/{resource}/{name}", json={"metadata": {"labels": {"tier": "two"}}}, headers=MERGE)
    assert patched.status_code == 200 and patched.json()["metadata"]["labels"] == {"tier": "two"}
    assert admin.delete(f"{NS}/{resource}/{name}").status_code == 200
    assert admin.get(f"{NS}/{resource}/{name}").status_code == 404


def test_list_and_watch_by_name_see_one_object_and_its_changes(apiserver):
    admin = apiserver.admin
    admin.post(f"{NS}/configmaps", json=objects.configmap("cfg", {"a": "1"}))
    admin.post(f"{NS}/configmaps", json=objects.configmap("other", {"a": "1"}))
    one = {"fieldSelector": "metadata.name=cfg"}
    listed = admin.get(f"{NS}/configmaps", params=one).json()
    assert [i["metadata"]["name"] for i in listed["items"]] == ["cfg"]
    with admin.stream("GET", f"{NS}/configmaps", params={**one, "watch": "1",
                                                         "resourceVersion": listed["metadata"]["resourceVersion"]}) as response:
        events = watch_events(response)
        admin.patch(f"{NS}/configmaps/other", json={"data": {"a": "2"}}, headers=MERGE)
        admin.patch(f"{NS}/configmaps/cfg", json={"data": {"a": "2"}}, headers=MERGE)
        admin.delete(f"{NS}/configmaps/cfg")
        modified, deleted = take(events, 2)
    assert (modified["type"], modified["object"]["metadata"]["name"], modified["object"]["data"]) == ("MODIFIED", "cfg", {"a": "2"})
    assert (deleted["type"], deleted["object"]["metadata"]["name"]) == ("DELETED", "cfg")


def test_secret_data_is_base64_and_string_data_is_folded_into_it(apiserver):
    secret = objects.secret("s", {"bin": b"\x00\xff"})
    secret["stringData"] = {"text": "hello"}
    stored = apiserver.admin.post(f"{NS}/secrets", json=secret).json()
    assert "stringData" not in stored
    assert {k: base64.b64decode(v) for k, v in stored["data"].items()} == {"bin": b"\x00\xff", "text": b"hello"}
    assert stored["type"] == "Opaque"
    bad = objects.secret("bad")
    bad["data"] = {"k": "not base64!"}
    response = apiserver.admin.post(f"{NS}/secrets", json=bad)
    assert response.status_code == 400 and "illegal base64 data" in response.json()["message"]


@pytest.mark.parametrize("body, field", [
    (objects.configmap("cfg", {"bad key": "1"}), "data[bad key]"),
    (objects.secret("s", {"k": b"v"}, type_="kubernetes.io/dockerconfigjson"), "data[.dockerconfigjson]"),
    (objects.service("Web"), "metadata.name"),
    (objects.service("web", ports=[{"port": 80}, {"port": 81}]), "spec.ports[0].name"),
    (objects.service("web", ports=[{"port": 80, "protocol": "HTTP"}]), "spec.ports[0].protocol"),
    (objects.service("web", ports=[]), "spec.ports"),
    (objects.serviceaccount("Robot_1"), "metadata.name"),
], ids=["configmap-key", "dockerconfigjson-key", "service-name", "port-names", "protocol", "no-ports", "sa-name"])
def test_go_validation_answers_422_naming_the_field(apiserver, body, field):
    resource = {"ConfigMap": "configmaps", "Secret": "secrets", "Service": "services", "ServiceAccount": "serviceaccounts"}
    response = apiserver.admin.post(f"{NS}/{resource[body['kind']]}", json=body)
    assert response.status_code == 422, response.text
    assert field in [c["field"] for c in response.json()["details"]["causes"]]


def test_immutable_configmap_data_cannot_change(apiserver):
    apiserver.admin.post(f"{NS}/configmaps", json=objects.configmap("cfg", {"a": "1"}, immutable=True))
    response = apiserver.admin.patch(f"{NS}/configmaps/cfg", json={"data": {"a": "2"}}, headers=MERGE)
    assert response.status_code == 422
    assert response.json()["message"] == 'ConfigMap "cfg" is invalid: data: Forbidden: field is immutable when `immutable` is set'


def test_services_get_a_cluster_ip_from_the_service_range_and_keep_it(apiserver):
    admin = apiserver.admin
    web = admin.post(f"{NS}/services", json=objects.service("web", ports=[80])).json()
    ip = web["spec"]["clusterIP"]
    assert ip.startswith("10.96.0.") and web["spec"]["clusterIPs"] == [ip] and ip != "10.96.0.1"
    assert web["spec"]["ports"] == [{"port": 80, "protocol": "TCP", "targetPort": 80}]
    assert (web["spec"]["type"], web["spec"]["sessionAffinity"], web["spec"]["ipFamilies"]) == ("ClusterIP", "None", ["IPv4"])
    del web["spec"]["clusterIP"], web["spec"]["clusterIPs"]
    assert admin.put(f"{NS}/services/web", json=web).json()["spec"]["clusterIP"] == ip
    taken = admin.post(f"{NS}/services", json=objects.service("dns", cluster_ip=ip))
    assert taken.status_code == 422 and "provided IP is already allocated" in taken.json()["message"]
    outside = admin.post(f"{NS}/services", json=objects.service("dns", cluster_ip="10.0.0.10"))
    assert outside.status_code == 422
    assert "The range of valid IPs is 10.96.0.0/24" in outside.json()["message"]
    assert admin.post(f"{NS}/services", json=objects.service("dns", cluster_ip="10.96.0.10")).status_code == 201


def test_a_cluster_starts_with_its_service_account_root_ca_and_kubernetes_service(apiserver):
    admin = apiserver.admin
    assert admin.get(f"{NS}/serviceaccounts/default").status_code == 200
    root_ca = admin.get(f"{NS}/configmaps/kube-root-ca.crt").json()
    assert root_ca["data"] == {"ca.crt": apiserver.ca_pem.decode()}
    kubernetes = admin.get(f"{NS}/services/kubernetes").json()["spec"]
    assert kubernetes["clusterIP"] == "10.96.0.1"
    assert kubernetes["ports"] == [{"name": "https", "port": 443, "protocol": "TCP", "targetPort": apiserver.port}]
    for namespace in ("kube-system", "kube-public", "kube-node-lease"):
        assert admin.get(f"/api/v1/namespaces/{namespace}/serviceaccounts/default").status_code == 200
    admin.post("/api/v1/namespaces", json={"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team"}})
    assert admin.get("/api/v1/namespaces/team/serviceaccounts/default").status_code == 200
    assert admin.get("/api/v1/namespaces/team/configmaps/kube-root-ca.crt").status_code == 200


def test_a_pod_whose_service_account_is_missing_is_refused(apiserver):
    pod = objects.pod("web", "node1", serviceAccountName="ghost")
    response = apiserver.admin.post(f"{NS}/pods", json=pod)
    assert response.status_code == 403
    assert response.json()["message"] == ('pods "web" is forbidden: error looking up service account default/ghost: '
                                          'serviceaccount "ghost" not found')
    apiserver.admin.post(f"{NS}/serviceaccounts", json=objects.serviceaccount("ghost"))
    assert apiserver.admin.post(f"{NS}/pods", json=pod).status_code == 201
