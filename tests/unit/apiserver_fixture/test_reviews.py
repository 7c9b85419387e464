"""TokenReview and SubjectAccessReview as the test API server answers them: who may create
them (system:masters, and nodes through the node rules), what a token authenticates as, and
what the server's authorizer plus the grants a test sets allow."""

from __future__ import annotations

import pytest

from tests.support.apiserver import ApiServerError, objects
from tests.unit.apiserver_fixture.helpers import NS, forbidden_message, run_pod

TOKEN_REVIEWS = "/apis/authentication.k8s.io/v1/tokenreviews"
SARS = "/apis/authorization.k8s.io/v1/subjectaccessreviews"
API_AUDIENCE = "https://kubernetes.default.svc.cluster.local"


def token_review(token: str, audiences: list[str] | None = None) -> dict:
    spec: dict = {"token": token}
    if audiences is not None:
        spec["audiences"] = audiences
    return {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": spec}


def sar(user: str, verb: str = "get", subresource: str = "proxy", *, groups: list[str] | None = None,
        resource: str = "nodes", name: str = "node1", namespace: str = "") -> dict:
    attributes = {"verb": verb, "group": "", "version": "v1", "resource": resource, "subresource": subresource,
                  "name": name}
    if namespace:
        attributes["namespace"] = namespace
    spec: dict = {"resourceAttributes": attributes, "user": user}
    if groups:
        spec["groups"] = groups
    return {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec}


def review(client, path: str, body: dict) -> dict:
    response = client.post(path, json=body)
    assert response.status_code == 201, response.text
    answer = response.json()
    assert answer["spec"] == body["spec"]
    return answer["status"]


# --- who may create reviews --------------------------------------------------------------------


@pytest.mark.parametrize("path, body", [(TOKEN_REVIEWS, token_review("x")), (SARS, sar("alice"))])
def test_nodes_and_masters_may_create_reviews_and_nobody_else(apiserver, node1, path, body):
    assert node1.post(path, json=body).status_code == 201
    assert apiserver.admin.post(path, json=body).status_code == 201
    refused = apiserver.client("alice").post(path, json=body)
    resource = path.rsplit("/", 1)[1]
    assert f'User "alice" cannot create resource "{resource}"' in forbidden_message(refused)


@pytest.mark.parametrize("path", [TOKEN_REVIEWS, SARS])
def test_reviews_are_create_only(apiserver, node1, path):
    assert "cannot list resource" in forbidden_message(node1.get(path))
    answer = apiserver.admin.get(path)
    assert answer.status_code == 405 and answer.json()["reason"] == "MethodNotAllowed"
    assert apiserver.admin.post(path + "/name", json={}).status_code == 404
    assert apiserver.admin.post("/apis/authentication.k8s.io/v1/namespaces/default/tokenreviews", json={}).status_code == 404


def test_reviews_are_in_the_request_log(apiserver, node1):
    node1.post(TOKEN_REVIEWS, json=token_review("x"))
    node1.post(SARS, json=sar("alice"))
    logged = [(r.verb, r.resource, r.status) for r in apiserver.requests(user="system:node:node1")]
    assert logged == [("create", "tokenreviews", 201), ("create", "subjectaccessreviews", 201)]


def test_faults_apply_to_reviews(apiserver, node1):
    apiserver.fail(500, count=1, resources="subjectaccessreviews")
    assert node1.post(SARS, json=sar("alice")).status_code == 500
    assert node1.post(SARS, json=sar("alice")).status_code == 201


# --- TokenReview -------------------------------------------------------------------------------------


def test_a_registered_token_authenticates_its_user_and_groups(apiserver, node1):
    token = apiserver.add_token("system:node:node2")
    status = review(node1, TOKEN_REVIEWS, token_review(token))
    assert status == {"authenticated": True, "audiences": [API_AUDIENCE], "user": {
        "username": "system:node:node2", "groups": ["system:nodes", "system:authenticated"]}}


def test_an_unknown_token_is_not_authenticated(node1):
    status = review(node1, TOKEN_REVIEWS, token_review("not-a-token"))
    assert status == {"user": {}, "error": "invalid bearer token"}


def test_a_review_without_a_token_is_a_bad_request(node1):
    answer = node1.post(TOKEN_REVIEWS, json=token_review(""))
    assert answer.status_code == 400 and "token is required" in answer.json()["message"]


def test_a_review_with_a_misspelt_field_is_refused_strictly(node1):
    body = token_review("x")
    body["spec"]["tokn"] = "y"
    answer = node1.post(TOKEN_REVIEWS, json=body)
    assert answer.status_code == 400 and 'unknown field "spec.tokn"' in answer.json()["message"]


def test_an_issued_service_account_token_authenticates_until_its_pod_is_gone(apiserver, node1):
    pod = run_pod(apiserver, "web")
    issued = node1.post(f"{NS}/serviceaccounts/default/token", json=objects.token_request(pod)).json()
    token = issued["status"]["token"]
    account = apiserver.admin.get(f"{NS}/serviceaccounts/default").json()
    status = review(node1, TOKEN_REVIEWS, token_review(token))
    assert status["authenticated"] is True and status["audiences"] == [API_AUDIENCE]
    user = status["user"]
    assert (user["username"], user["uid"]) == ("system:serviceaccount:default:default", account["metadata"]["uid"])
    assert user["groups"] == ["system:serviceaccounts", "system:serviceaccounts:default", "system:authenticated"]
    assert user["extra"]["authentication.kubernetes.io/pod-name"] == ["web"]
    assert user["extra"]["authentication.kubernetes.io/pod-uid"] == [pod["metadata"]["uid"]]
    assert user["extra"]["authentication.kubernetes.io/credential-id"][0].startswith("JTI=")
    assert apiserver.admin.delete(f"{NS}/pods/web", params={"gracePeriodSeconds": "0"}).status_code == 200
    gone = review(node1, TOKEN_REVIEWS, token_review(token))
    assert "authenticated" not in gone and "invalidated" in gone["error"]


def test_a_service_account_token_for_another_audience_is_not_authenticated(apiserver, node1):
    pod = run_pod(apiserver, "web")
    token = node1.post(f"{NS}/serviceaccounts/default/token", json=objects.token_request(pod)).json()["status"]["token"]
    assert review(node1, TOKEN_REVIEWS, token_review(token, ["vault"])).get("authenticated") is None
    ok = review(node1, TOKEN_REVIEWS, token_review(token, ["vault", API_AUDIENCE]))
    assert ok["authenticated"] is True and ok["audiences"] == [API_AUDIENCE]


def test_a_token_with_a_forged_signature_is_not_authenticated(apiserver, node1):
    pod = run_pod(apiserver, "web")
    token = node1.post(f"{NS}/serviceaccounts/default/token", json=objects.token_request(pod)).json()["status"]["token"]
    header, claims, signature = token.split(".")
    forged = ".".join([header, claims, ("A" if signature[0] != "A" else "B") + signature[1:]])
    assert review(node1, TOKEN_REVIEWS, token_review(forged)) == {"user": {}, "error": "invalid bearer token"}


# --- SubjectAccessReview ----------------------------------------------------------------------------


def test_system_masters_may_do_anything(node1):
    assert review(node1, SARS, sar("admin", "create", "proxy", groups=["system:masters"])) == {"allowed": True}


def test_nobody_else_may_do_anything_until_granted(apiserver, node1):
    assert review(node1, SARS, sar("alice")) == {"allowed": False}
    binding = apiserver.grant("alice", verbs=["get"], resources=["nodes/proxy"])
    assert review(node1, SARS, sar("alice")) == {"allowed": True, "reason":
        f'RBAC: allowed by ClusterRoleBinding "{binding}" of ClusterRole "{binding}" to User "alice"'}
    assert review(node1, SARS, sar("alice", "create")) == {"allowed": False}  # another verb
    assert review(node1, SARS, sar("alice", subresource="stats")) == {"allowed": False}  # another subresource
    assert review(node1, SARS, sar("bob")) == {"allowed": False}  # another user
    apiserver.clear_grants()
    assert review(node1, SARS, sar("alice")) == {"allowed": False}


def test_grants_to_groups_and_wildcards(apiserver, node1):
    apiserver.grant(group="monitoring", verbs="get", resources="nodes/*", name="metrics-reader")
    status = review(node1, SARS, sar("prom", subresource="metrics", groups=["monitoring"]))
    assert status == {"allowed": True, "reason":
        'RBAC: allowed by ClusterRoleBinding "metrics-reader" of ClusterRole "metrics-reader" to Group "monitoring"'}
    assert review(node1, SARS, sar("prom", subresource="", resource="nodes", groups=["monitoring"]))["allowed"] is False
    apiserver.grant("ops", verbs="*", resources="*")
    assert review(node1, SARS, sar("ops", "delete", "checkpoint"))["allowed"] is True


def test_node_identities_get_the_node_authorizer_answer(node1):
    node = ["system:nodes"]
    assert review(node1, SARS, sar("system:node:node1", "get", "", groups=node))["allowed"] is True
    assert review(node1, SARS, sar("system:node:node1", "get", "", groups=node, name="node2"))["allowed"] is False
    assert review(node1, SARS, sar("system:node:node1", "get", "proxy", groups=node))["allowed"] is False


def test_a_subject_access_review_must_name_one_kind_of_attributes_and_someone(node1):
    body = sar("alice")
    body["spec"]["nonResourceAttributes"] = {"path": "/healthz", "verb": "get"}
    body["spec"].pop("user")
    answer = node1.post(SARS, json=body)
    assert answer.status_code == 422
    assert answer.json()["message"] == (
        'SubjectAccessReview.authorization.k8s.io "" is invalid: [spec: Invalid value: {...}: exactly one of '
        'nonResourceAttributes or resourceAttributes must be specified, spec.user: Invalid value: "": at least one '
        "of user or group must be specified]")


def test_non_resource_reviews_allow_system_masters_only(node1):
    body = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
            "spec": {"nonResourceAttributes": {"path": "/healthz", "verb": "get"}, "user": "alice"}}
    assert review(node1, SARS, body) == {"allowed": False}
    body["spec"]["groups"] = ["system:masters"]
    assert review(node1, SARS, body) == {"allowed": True}


def test_bad_grants_are_refused_by_the_control_port(apiserver):
    with pytest.raises(ApiServerError, match="needs users or groups"):
        apiserver.grant(verbs="get", resources="nodes/proxy")
    with pytest.raises(ApiServerError, match="needs verbs and resources"):
        apiserver.grant("alice", verbs=[], resources="nodes/proxy")
