"""TLS and authentication: the server's certificate verifies against the CA it hands out;
client certificates name the user (CN) and groups (O); no certificate, a certificate from
another CA or an expired one answers 401; bearer tokens and kubeconfigs work."""

from __future__ import annotations

import base64
import ssl

import httpx
import pytest
import yaml

from tests.support.apiserver import Identity


def _client_with(apiserver, cert_pem: bytes, key_pem: bytes, tmp_path) -> httpx.Client:
    (tmp_path / "c.crt").write_bytes(cert_pem)
    (tmp_path / "c.key").write_bytes(key_pem)
    context = ssl.create_default_context(cafile=str(apiserver.ca_path))
    context.load_cert_chain(str(tmp_path / "c.crt"), str(tmp_path / "c.key"))
    return httpx.Client(base_url=apiserver.url, verify=context, timeout=10)


def test_server_certificate_verifies_against_the_ca_for_127_0_0_1(apiserver):
    assert apiserver.url.startswith("https://127.0.0.1:")
    assert apiserver.admin.get("/version").json()["minor"] == "36"
    with httpx.Client(verify=ssl.create_default_context(), timeout=10) as untrusting:
        with pytest.raises(httpx.ConnectError):
            untrusting.get(apiserver.url + "/version")


def test_no_client_certificate_is_401_unauthorized(apiserver):
    response = apiserver.client(None).get("/api/v1/namespaces/default/pods")
    assert response.status_code == 401
    assert response.json() == {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                               "message": "Unauthorized", "reason": "Unauthorized", "code": 401}


def test_certificate_from_an_unknown_ca_is_401(apiserver, tmp_path):
    cert, key = apiserver.issue_client_cert("admin", "system:masters", trusted=False)
    with _client_with(apiserver, cert, key, tmp_path) as client:
        assert client.get("/api/v1/nodes").status_code == 401


def test_expired_certificate_is_401(apiserver, tmp_path):
    cert, key = apiserver.issue_client_cert("admin", "system:masters", expired=True)
    with _client_with(apiserver, cert, key, tmp_path) as client:
        assert client.get("/api/v1/nodes").status_code == 401


def test_issued_certificate_authenticates_cn_as_user_and_o_as_groups(apiserver, tmp_path):
    cert, key = apiserver.issue_client_cert(common_name="system:node:node1", organization="system:nodes")
    with _client_with(apiserver, cert, key, tmp_path) as client:
        response = client.get("/api/v1/nodes")
    assert response.status_code == 403
    assert 'User "system:node:node1"' in response.json()["message"]
    assert apiserver.requests(verb="list", resource="nodes")[-1].user == "system:node:node1"


def test_bearer_token_authenticates_and_an_unknown_one_is_401(apiserver):
    token = apiserver.add_token(Identity.admin())
    with httpx.Client(base_url=apiserver.url, verify=apiserver.ssl_context(None), timeout=10) as client:
        assert client.get("/api/v1/nodes", headers={"Authorization": f"Bearer {token}"}).status_code == 200
        assert client.get("/api/v1/nodes", headers={"Authorization": "Bearer nope"}).status_code == 401


@pytest.mark.parametrize("inline", [True, False])
def test_kubeconfig_names_server_ca_and_client_certificate(apiserver, inline):
    path = apiserver.kubeconfig("system:node:node1", inline=inline)
    config = yaml.safe_load(path.read_text())
    context = next(c["context"] for c in config["contexts"] if c["name"] == config["current-context"])
    cluster = next(c["cluster"] for c in config["clusters"] if c["name"] == context["cluster"])
    user = next(u["user"] for u in config["users"] if u["name"] == context["user"])
    assert cluster["server"] == apiserver.url
    if inline:
        ca = base64.b64decode(cluster["certificate-authority-data"])
        cert, key = (base64.b64decode(user[k]) for k in ("client-certificate-data", "client-key-data"))
    else:
        ca = open(cluster["certificate-authority"], "rb").read()
        cert, key = (open(user[k], "rb").read() for k in ("client-certificate", "client-key"))
    assert ca == apiserver.ca_pem
    tls = ssl.create_default_context(cadata=ca.decode())
    (path.parent / "k.crt").write_bytes(cert)
    (path.parent / "k.key").write_bytes(key)
    tls.load_cert_chain(str(path.parent / "k.crt"), str(path.parent / "k.key"))
    with httpx.Client(base_url=cluster["server"], verify=tls, timeout=10) as client:
        response = client.get("/api/v1/nodes", params={"fieldSelector": "metadata.name=node1"})
    assert response.status_code == 200


@pytest.mark.parametrize("inline", [True, False])
def test_token_kubeconfig(apiserver, tmp_path, inline):
    path = apiserver.write_kubeconfig(tmp_path / "node.kubeconfig", "system:node:node1", inline=inline, token=True)
    user = yaml.safe_load(path.read_text())["users"][0]["user"]
    token = user["token"] if inline else open(user["tokenFile"]).read()
    with httpx.Client(base_url=apiserver.url, verify=apiserver.ssl_context(None), timeout=10) as client:
        response = client.get("/api/v1/nodes/node1", headers={"Authorization": f"Bearer {token}"})
    assert response.status_code == 404  # authenticated as the node, which may read its own (absent) Node
