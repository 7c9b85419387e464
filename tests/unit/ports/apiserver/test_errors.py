"""error_from_status() and request_info(): each answer becomes the ApiError an operator or an
actor can act on, with a message naming the request, the identity and the fix."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest

from pykubelet.ports.apiserver import (
    AlreadyExists,
    ApiError,
    ApiUnavailable,
    Conflict,
    Forbidden,
    Gone,
    Invalid,
    NotFound,
    ServerError,
    TooManyRequests,
    Unauthorized,
    error_from_status,
    load_kubeconfig,
    request_info,
    unavailable,
)

from .conftest import kubeconfig_doc, write_kubeconfig
from .pki import Pki

URL = "https://127.0.0.1:6443"


def status(code: int, reason: str, message: str, **details: object) -> dict:
    body = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code,
            "reason": reason, "message": message}
    if details:
        body["details"] = details
    return body


@pytest.fixture
def creds(tmp_path: Path, pki: Pki):
    return load_kubeconfig(write_kubeconfig(tmp_path / "kubelet.conf", kubeconfig_doc(
        URL, ca=str(pki.ca.cert), cert=str(pki.node1.cert), key=str(pki.node1.key))))


@pytest.mark.parametrize("method, path, params, expected", [
    ("GET", "/api/v1/pods", {"fieldSelector": "spec.nodeName=n"}, ("list", "pods", None, None)),
    ("GET", "/api/v1/pods", {"watch": "true"}, ("watch", "pods", None, None)),
    ("GET", "/api/v1/namespaces/default/pods/web", None, ("get", "pods", "default", "web")),
    ("PATCH", "/api/v1/namespaces/default/pods/web/status", None,
     ("patch", "pods/status", "default", "web")),
    ("POST", "/api/v1/nodes", None, ("create", "nodes", None, None)),
    ("PUT", "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/node1", None,
     ("update", "leases", "kube-node-lease", "node1")),
    ("DELETE", "/api/v1/namespaces/default/pods/web", None, ("delete", "pods", "default", "web")),
    ("DELETE", "/api/v1/namespaces/default/pods", None, ("deletecollection", "pods", "default", None)),
    ("GET", "/api/v1/namespaces/default", None, ("get", "namespaces", None, "default")),
])
def test_request_info(method, path, params, expected) -> None:
    info = request_info(method, path, params)
    assert (info.verb, info.resource, info.namespace, info.name) == expected


CLASSES = [
    (400, "BadRequest", ApiError),
    (401, "Unauthorized", Unauthorized),
    (403, "Forbidden", Forbidden),
    (404, "NotFound", NotFound),
    (409, "Conflict", Conflict),
    (409, "AlreadyExists", AlreadyExists),
    (410, "Expired", Gone),
    (410, "Gone", Gone),
    (422, "Invalid", Invalid),
    (429, "TooManyRequests", TooManyRequests),
    (500, "InternalError", ServerError),
    (503, "ServiceUnavailable", ServerError),
    (504, "Timeout", ServerError),
]


@pytest.mark.parametrize("code, reason, cls", CLASSES)
def test_status_code_and_reason_choose_the_class(code: int, reason: str, cls: type) -> None:
    err = error_from_status(code, status(code, reason, "m"), method="GET", path="/api/v1/nodes/n")
    assert type(err) is cls
    assert (err.status, err.reason, err.message, err.verb, err.method) == (code, reason, "m", "get", "GET")


def test_a_body_that_is_not_a_status_still_gives_the_class_and_text() -> None:
    err = error_from_status(502, None, method="GET", path="/api/v1/nodes/n",
                            url=f"{URL}/api/v1/nodes/n", text="<html>bad gateway</html>\n")
    assert type(err) is ServerError
    assert str(err) == (f"GET {URL}/api/v1/nodes/n: 502 Unknown: <html>bad gateway</html>; "
                        "retry with back-off")


def test_unauthorized_names_the_certificate_and_the_kubeconfig(creds) -> None:
    err = error_from_status(401, status(401, "Unauthorized", "Unauthorized"), method="GET",
                            path="/api/v1/nodes/node1", url=f"{URL}/api/v1/nodes/node1",
                            credentials=creds)
    cert = creds.client_certificate
    assert str(err) == (
        f"GET {URL}/api/v1/nodes/node1: 401 Unauthorized: the API server refused the client "
        f"certificate {cert.source} (CN=system:node:node1, O=system:nodes, valid until "
        f"{cert.not_after:%Y-%m-%dT%H:%M:%SZ}) of user 'kubelet' in kubeconfig "
        f"{creds.kubeconfig}: the certificate is expired, not yet valid, or not signed by the "
        "cluster's client CA; renew it (or bootstrap the node again), or point --kubeconfig at "
        "valid credentials")


def test_unauthorized_with_a_token(tmp_path: Path, pki: Pki) -> None:
    (tmp_path / "token").write_text("t")
    creds = load_kubeconfig(write_kubeconfig(tmp_path / "k.conf", kubeconfig_doc(
        URL, ca=str(pki.ca.cert), tokenFile="token")))
    err = error_from_status(401, status(401, "Unauthorized", "Unauthorized"), method="GET",
                            path="/api/v1/nodes/node1", credentials=creds)
    assert str(err) == (
        f"GET /api/v1/nodes/node1: 401 Unauthorized: the API server refused the bearer token "
        f"in tokenFile {tmp_path}/token of user 'kubelet' in kubeconfig {tmp_path}/k.conf: the "
        "token is expired, revoked or unknown; issue a new one, or point --kubeconfig at valid "
        "credentials")


# What kube-apiserver's Node authorizer answers (the message is the server's).
LIST_PODS = ('pods is forbidden: User "system:node:node1" cannot list resource "pods" in API '
             'group "" at the cluster scope: node \'node1\' cannot read all pods')


@pytest.mark.parametrize("method, path, params, message, expected", [
    ("GET", "/api/v1/pods", None, LIST_PODS,
     "system:node:node1 may not list pods at the cluster scope; a kubelet may list only pods "
     f"with fieldSelector spec.nodeName=node1 (API server: {LIST_PODS})"),
    ("GET", "/api/v1/pods", {"watch": "true", "fieldSelector": "spec.nodeName=node2"}, "denied",
     "system:node:node1 may not watch pods at the cluster scope; a kubelet may watch only pods "
     "with fieldSelector spec.nodeName=node1 (API server: denied)"),
    ("GET", "/api/v1/nodes", None, "denied",
     "system:node:node1 may not list nodes at the cluster scope; a kubelet may list only its "
     "own Node, with fieldSelector metadata.name=node1 (API server: denied)"),
    ("PATCH", "/api/v1/nodes/node2/status", None, "denied",
     "system:node:node1 may not patch nodes/status \"node2\"; a kubelet may write only its own "
     "Node 'node1': check --hostname-override against the node name in the client certificate "
     "(API server: denied)"),
    ("PUT", "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/node2", None, "denied",
     "system:node:node1 may not update leases \"node2\" in namespace kube-node-lease; a kubelet "
     "may write only its own Lease kube-node-lease/node1 (API server: denied)"),
    ("PATCH", "/api/v1/namespaces/default/pods/web/status", None, "denied",
     "system:node:node1 may not patch pods/status \"web\" in namespace default; the Node "
     "authorizer and NodeRestriction admission let a node touch only itself and the pods bound "
     "to it (API server: denied)"),
])
def test_forbidden_names_identity_verb_resource_and_the_rule(creds, method, path, params,
                                                             message, expected) -> None:
    err = error_from_status(403, status(403, "Forbidden", message), method=method, path=path,
                            params=params, credentials=creds)
    assert isinstance(err, Forbidden)
    assert str(err) == f"{method} {path}: 403 Forbidden: {expected}"


def test_forbidden_for_an_identity_that_is_not_a_node() -> None:
    message = 'pods is forbidden: User "alice" cannot list resource "pods"'
    err = error_from_status(403, status(403, "Forbidden", message), method="GET",
                            path="/api/v1/pods")
    assert str(err) == (
        "GET /api/v1/pods: 403 Forbidden: alice may not list pods at the cluster scope; a "
        "kubelet needs a node identity: a client certificate with CN=system:node:<node name> "
        f"and O=system:nodes (API server: {message})")


def test_invalid_carries_the_causes() -> None:
    causes = [{"reason": "FieldValueRequired", "message": "Required value",
               "field": "spec.containers[0].image"}]
    err = error_from_status(422, status(422, "Invalid", 'Pod "web" is invalid: '
                                        "spec.containers[0].image: Required value",
                                        name="web", kind="Pod", causes=causes),
                            method="POST", path="/api/v1/namespaces/default/pods")
    assert isinstance(err, Invalid) and err.causes == causes
    assert str(err) == ('POST /api/v1/namespaces/default/pods: 422 Invalid: Pod "web" is '
                        "invalid: spec.containers[0].image: Required value")


def test_conflict_and_gone_say_what_to_do() -> None:
    conflict = error_from_status(
        409, status(409, "Conflict", 'Operation cannot be fulfilled on leases.coordination.k8s.io '
                    '"node1": the object has been modified'),
        method="PUT", path="/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/node1")
    assert str(conflict).endswith("the object has been modified; re-get the object and retry")
    gone = error_from_status(410, status(410, "Expired", "too old resource version: 5 (10)"),
                             method="GET", path="/api/v1/pods", params={"watch": "true"})
    assert gone.verb == "watch"
    assert str(gone) == ("GET /api/v1/pods: 410 Expired: too old resource version: 5 (10); "
                         "re-list to get a current resourceVersion")


def test_retry_after_comes_from_the_header_or_the_details() -> None:
    err = error_from_status(429, status(429, "TooManyRequests", "slow down",
                                        retryAfterSeconds=3),
                            method="GET", path="/api/v1/nodes/n")
    assert err.retry_after == 3.0
    assert str(err) == "GET /api/v1/nodes/n: 429 TooManyRequests: slow down; retry after 3s"
    err = error_from_status(503, None, method="GET", path="/x", retry_after=1.0)
    assert err.retry_after == 1.0


def test_unavailable_timeout_names_the_url_and_the_limit() -> None:
    err = unavailable(None, method="GET", path="/api/v1/nodes/n", url=f"{URL}/api/v1/nodes/n",
                      timeout=10.0)
    assert isinstance(err, ApiUnavailable) and err.status is None and err.timeout == 10.0
    assert str(err) == (f"GET {URL}/api/v1/nodes/n: the API server did not answer within 10s "
                        "(the client's request timeout); is it overloaded or unreachable?")


def test_unavailable_refused_names_the_kubeconfig(creds) -> None:
    err = unavailable(ConnectionRefusedError(111, "Connection refused"), method="GET",
                      path="/api/v1/nodes/n", url=f"{URL}/api/v1/nodes/n", credentials=creds)
    assert str(err) == (f"GET {URL}/api/v1/nodes/n: connection refused; is the API server "
                        "running at this address (clusters[local].server in kubeconfig "
                        f"{creds.kubeconfig})?")


def test_unavailable_wrong_ca_names_the_ca_source(creds) -> None:
    verify = ssl.SSLCertVerificationError(1, "certificate verify failed")
    verify.verify_message = "unable to get local issuer certificate"
    wrapped = RuntimeError("connect failed")
    wrapped.__cause__ = verify
    err = unavailable(wrapped, method="GET", path="/x", url=f"{URL}/x", credentials=creds)
    assert str(err) == (f"GET {URL}/x: TLS handshake failed: unable to get local issuer "
                        f"certificate; wrong CA? the server's certificate was checked against "
                        f"{creds.ca_source}")


def test_errors_can_be_made_by_hand_for_fakes() -> None:
    # Fake clients in actor tests raise these directly.
    err = Conflict(409, "Conflict", "the object has been modified", "/x", "update")
    assert str(err) == "update /x: 409 Conflict: the object has been modified"
    assert isinstance(err, ApiError) and err.details == {} and err.retry_after is None
    down = ApiUnavailable("the API server is down")
    assert str(down) == "the API server is down" and down.status is None
    assert isinstance(down, ApiError)
