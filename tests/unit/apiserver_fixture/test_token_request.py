"""TokenRequest (POST serviceaccounts/<sa>/token) as kube-apiserver v1.36 answers a node:
only for a service account a pod bound to the node uses, bound to that pod by name and
uid (NodeRestriction), for the API server's audience or one the pod's projected token
names; 201 with a JWT whose claims say who, for whom and until when."""

from __future__ import annotations

import datetime
import time

import pytest

from tests.support.apiserver import objects
from tests.unit.apiserver_fixture.helpers import forbidden_message, run_pod

NS = "/api/v1/namespaces/default"
TOKEN = f"{NS}/serviceaccounts/default/token"
API_AUDIENCE = "https://kubernetes.default.svc.cluster.local"







def test_token_for_a_pod_on_the_node_is_201_with_decodable_claims(apiserver, node1):
    pod = run_pod(apiserver, "web")
    before = int(time.time())
    response = node1.post(TOKEN, json=objects.token_request(pod))
    assert response.status_code == 201, response.text
    answer = response.json()
    assert (answer["kind"], answer["apiVersion"]) == ("TokenRequest", "authentication.k8s.io/v1")
    assert answer["spec"]["expirationSeconds"] == 3600 and answer["spec"]["audiences"] == [API_AUDIENCE]
    claims = objects.token_claims(answer["status"]["token"])
    assert claims["sub"] == "system:serviceaccount:default:default"
    assert claims["aud"] == [API_AUDIENCE]
    assert before <= claims["iat"] <= int(time.time()) and claims["exp"] == claims["iat"] + 3600
    private = claims["kubernetes.io"]
    account = apiserver.admin.get(f"{NS}/serviceaccounts/default").json()
    assert private["serviceaccount"] == {"name": "default", "uid": account["metadata"]["uid"]}
    assert private["pod"] == {"name": "web", "uid": pod["metadata"]["uid"]}
    assert private["node"]["name"] == "node1"
    expires = datetime.datetime.strptime(answer["status"]["expirationTimestamp"], "%Y-%m-%dT%H:%M:%SZ")
    assert expires.replace(tzinfo=datetime.timezone.utc).timestamp() == claims["exp"]


def test_token_requests_are_in_the_request_log(apiserver, node1):
    pod = run_pod(apiserver, "web")
    issued = node1.post(TOKEN, json=objects.token_request(pod, expiration_seconds=1200)).json()
    refused = node1.post(TOKEN, json=objects.token_request(pod_name="web", pod_uid="0000"))
    assert refused.status_code == 403
    unrelated = node1.post(f"{NS}/serviceaccounts/robot/token", json=objects.token_request(pod, audiences=["x"]))
    assert unrelated.status_code == 403  # refused by the authorizer, before the body is read
    ok, denied, unauthorized = apiserver.token_requests(user="system:node:node1")
    assert (ok.status, ok.name, ok.namespace) == (201, "default", "default")
    assert ok.token_request["status"]["token"] == issued["status"]["token"]
    assert ok.token_request["spec"]["expirationSeconds"] == 1200
    assert denied.status == 403 and denied.token_request["spec"]["boundObjectRef"]["uid"] == "0000"
    assert (unauthorized.status, unauthorized.name, unauthorized.token_request["spec"]["audiences"]) == (403, "robot", ["x"])
    assert all(r.token_request is None for r in apiserver.requests() if r.resource != "serviceaccounts/token")


def test_token_bound_to_another_nodes_pod_is_403(apiserver, node1):
    run_pod(apiserver, "mine")
    theirs = run_pod(apiserver, "theirs", "node2")
    message = forbidden_message(node1.post(TOKEN, json=objects.token_request(theirs)))
    assert message == 'serviceaccounts "default" is forbidden: node requested token bound to a pod scheduled on a different node'


def test_token_for_an_account_no_pod_on_the_node_uses_is_403(apiserver, node1):
    apiserver.admin.post(f"{NS}/serviceaccounts", json=objects.serviceaccount("robot"))
    theirs = run_pod(apiserver, "theirs", "node2", serviceAccountName="robot")
    run_pod(apiserver, "mine")
    message = forbidden_message(node1.post(f"{NS}/serviceaccounts/robot/token", json=objects.token_request(theirs)))
    assert message == ('serviceaccounts "robot" is forbidden: User "system:node:node1" cannot create resource '
                       '"serviceaccounts/token" in API group "" in the namespace "default": '
                       "no relationship found between node 'node1' and this object")


def test_token_with_a_pod_uid_that_does_not_match_is_403(apiserver, node1):
    run_pod(apiserver, "web")
    message = forbidden_message(node1.post(TOKEN, json=objects.token_request(pod_name="web", pod_uid="11111111-2222")))
    assert message == ('serviceaccounts "default" is forbidden: the UID in the bound object reference (11111111-2222) '
                       "does not match the UID in record. The object might have been deleted and then recreated")


@pytest.mark.parametrize("body, why", [
    (objects.token_request(), "node requested token not bound to a pod"),
    (objects.token_request(pod_name="web"), "node requested token with a pod binding without a uid"),
], ids=["unbound", "no-uid"])
def test_token_not_bound_to_a_pod_by_name_and_uid_is_403(apiserver, node1, body, why):
    run_pod(apiserver, "web")
    assert forbidden_message(node1.post(TOKEN, json=body)).endswith(why)


def test_token_for_a_missing_service_account_is_404(apiserver, node1):
    apiserver.admin.post(f"{NS}/serviceaccounts", json=objects.serviceaccount("robot"))
    pod = run_pod(apiserver, "web", serviceAccountName="robot")
    assert apiserver.admin.delete(f"{NS}/serviceaccounts/robot").status_code == 200
    response = node1.post(f"{NS}/serviceaccounts/robot/token", json=objects.token_request(pod))
    assert response.status_code == 404, response.text
    assert response.json()["message"] == 'serviceaccounts "robot" not found'


def test_audiences_are_the_api_servers_or_those_the_pods_projected_tokens_name(apiserver, node1):
    vault = {"name": "vault-token", "projected": {"sources": [{"serviceAccountToken": {"path": "t", "audience": "vault"}}]}}
    pod = run_pod(apiserver, "web", volumes=[vault])
    granted = node1.post(TOKEN, json=objects.token_request(pod, audiences=["vault"]))
    assert granted.status_code == 201, granted.text
    assert objects.token_claims(granted.json()["status"]["token"])["aud"] == ["vault"]
    assert node1.post(TOKEN, json=objects.token_request(pod, audiences=[API_AUDIENCE])).status_code == 201
    assert forbidden_message(node1.post(TOKEN, json=objects.token_request(pod, audiences=["elsewhere"]))) == (
        'serviceaccounts "default" is forbidden: audience "elsewhere" not found in pod spec volume, '
        "system:node:node1 is not authorized to request tokens for this audience")
    assert forbidden_message(node1.post(TOKEN, json=objects.token_request(pod, audiences=["vault", API_AUDIENCE]))).endswith(
        "node may only request 0 or 1 audiences")


@pytest.mark.parametrize("seconds, status", [(599, 422), (600, 201), (2**32 + 1, 422)])
def test_expiration_seconds_below_ten_minutes_or_above_2_to_the_32_is_422(apiserver, node1, seconds, status):
    pod = run_pod(apiserver, "web")
    response = node1.post(TOKEN, json=objects.token_request(pod, expiration_seconds=seconds))
    assert response.status_code == status, response.text
    if status == 422:
        body = response.json()
        assert body["reason"] == "Invalid" and body["details"]["causes"][0]["field"] == "spec.expirationSeconds"
        assert body["message"].startswith('TokenRequest.authentication.k8s.io "" is invalid: spec.expirationSeconds: '
                                          f"Invalid value: {seconds}: may not specify a duration")


def test_a_projected_tokens_3607_seconds_are_extended_with_a_warn_after(apiserver, node1):
    pod = run_pod(apiserver, "web")
    answer = node1.post(TOKEN, json=objects.token_request(pod, expiration_seconds=3607)).json()
    claims = objects.token_claims(answer["status"]["token"])
    assert claims["kubernetes.io"]["warnafter"] == claims["iat"] + 3607
    assert claims["exp"] == claims["iat"] + 365 * 24 * 3600
    expires = datetime.datetime.strptime(answer["status"]["expirationTimestamp"], "%Y-%m-%dT%H:%M:%SZ")
    assert expires.replace(tzinfo=datetime.timezone.utc).timestamp() == claims["iat"] + 3607  # the requested expiry


def test_admin_token_requests_follow_token_rest_rules(apiserver):
    admin = apiserver.admin
    unbound = admin.post(TOKEN, json=objects.token_request(audiences=["a", "b"]))
    assert unbound.status_code == 201 and objects.token_claims(unbound.json()["status"]["token"])["aud"] == ["a", "b"]
    assert "pod" not in objects.token_claims(unbound.json()["status"]["token"])["kubernetes.io"]
    pod = run_pod(apiserver, "web")
    stale = admin.post(TOKEN, json=objects.token_request(pod_name="web", pod_uid="0000"))
    assert stale.status_code == 409 and stale.json()["reason"] == "Conflict"
    apiserver.admin.post(f"{NS}/serviceaccounts", json=objects.serviceaccount("robot"))
    wrong_account = admin.post(f"{NS}/serviceaccounts/robot/token", json=objects.token_request(pod))
    assert wrong_account.status_code == 400
    assert wrong_account.json()["message"] == ('cannot bind token for serviceaccount "robot" to pod running with '
                                               "different serviceaccount name.")
    assert admin.post(TOKEN, json=objects.token_request(pod_name="gone")).status_code == 404


def test_the_token_subresource_takes_only_post(apiserver, node1):
    run_pod(apiserver, "web")
    assert apiserver.admin.get(TOKEN).status_code == 405
    assert forbidden_message(node1.get(TOKEN)).endswith(": can only create tokens for individual service accounts")
