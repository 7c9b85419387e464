"""Small helpers the test API server's own tests share."""

from __future__ import annotations

from tests.support.apiserver import objects

NS = "/api/v1/namespaces/default"


def forbidden_message(response) -> str:
    """The message of a 403 Status (asserting it is one)."""
    assert response.status_code == 403, response.text
    body = response.json()
    assert body["kind"] == "Status" and body["reason"] == "Forbidden" and body["code"] == 403
    return body["message"]


def run_pod(apiserver, name: str, node: str = "node1", **spec) -> dict:
    """Create a pod bound to `node` as admin; the stored object."""
    created = apiserver.admin.post(f"{NS}/pods", json=objects.pod(name, node, **spec))
    assert created.status_code == 201, created.text
    return created.json()
