"""Fixtures of the API-server port's tests: a PKI, kubeconfig files, a scripted HTTPS server."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from .https_server import HttpsServer
from .pki import Pki, make_pki


@pytest.fixture(scope="session")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def kubeconfig_doc(server: str, *, ca: str | None = None, cert: str | None = None,
                   key: str | None = None, **user: object) -> dict:
    """A kubelet-style kubeconfig (context "default", cluster "local", user "kubelet")."""
    cluster: dict = {"server": server}
    if ca is not None:
        cluster["certificate-authority"] = ca
    auth: dict = dict(user)
    if cert is not None:
        auth["client-certificate"] = cert
    if key is not None:
        auth["client-key"] = key
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "local", "cluster": cluster}],
        "contexts": [{"name": "default", "context": {"cluster": "local", "user": "kubelet"}}],
        "users": [{"name": "kubelet", "user": auth}],
        "current-context": "default",
    }


def write_kubeconfig(path: Path, doc: dict) -> str:
    path.write_text(yaml.safe_dump(doc))
    return str(path)


@pytest.fixture
def https_server(pki: Pki) -> Iterator[HttpsServer]:
    server = HttpsServer(pki.server.cert, pki.server.key, client_ca=pki.ca.cert).start()
    yield server
    server.stop()


@pytest.fixture
def node_kubeconfig(tmp_path: Path, pki: Pki, https_server: HttpsServer) -> str:
    """A kubeconfig for node1 (client certificate) against https_server."""
    return write_kubeconfig(tmp_path / "kubelet.conf", kubeconfig_doc(
        https_server.url, ca=str(pki.ca.cert), cert=str(pki.node1.cert), key=str(pki.node1.key)))
