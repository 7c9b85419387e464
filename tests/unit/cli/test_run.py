"""Which runtime `pykubelet run` picks: the embedded one only when asked, or in standalone
mode when the default endpoint has no socket; cluster mode never falls back."""

from __future__ import annotations

import pytest

from pykubelet.cli import run
from pykubelet.cli.config import build_configuration
from pykubelet.ports.serving_cert import self_signed

EMBEDDED = "unix:///tmp/root/embedded-runtime/runtime.sock"


@pytest.fixture
def started(monkeypatch):
    calls: list[str] = []

    def ensure_running(root_dir: str) -> str:
        calls.append(root_dir)
        return EMBEDDED

    monkeypatch.setattr(run, "ensure_embedded_runtime", ensure_running)
    return calls


@pytest.mark.parametrize(
    "argv, default_socket_exists, expected",
    [
        ([], False, EMBEDDED),
        ([], True, "unix:///run/containerd/containerd.sock"),
        (["--container-runtime-endpoint=embedded"], True, EMBEDDED),
        (["--container-runtime-endpoint=unix:///run/other.sock"], False, "unix:///run/other.sock"),
        (["--kubeconfig=/etc/kubernetes/kubelet.conf"], False, "unix:///run/containerd/containerd.sock"),
    ],
    ids=["standalone-no-socket", "standalone-socket", "asked", "explicit-endpoint", "cluster-mode"],
)
def test_runtime_endpoint_choice(monkeypatch, started, argv, default_socket_exists, expected):
    monkeypatch.setattr(run, "_socket_exists", lambda endpoint: default_socket_exists)
    loaded = build_configuration(["--root-dir=/tmp/root", *argv])
    endpoint = run.runtime_endpoint(loaded.flags, loaded.config, loaded.explicit, "/tmp/root")
    assert endpoint == expected
    assert started == (["/tmp/root"] if expected == EMBEDDED else [])


@pytest.mark.parametrize(
    "argv, address",
    [
        ([], "127.0.0.1"),  # standalone, anonymous and AlwaysAllow: this machine only
        (["--address=0.0.0.0"], "0.0.0.0"),  # the operator chose
        (["--anonymous-auth=false", "--client-ca-file={ca}"], "0.0.0.0"),  # not open to all
    ],
    ids=["standalone-defaults", "address-given", "authenticated"],
)
def test_a_kubelet_api_open_to_anyone_binds_loopback_unless_told(tmp_path, argv, address):
    ca = tmp_path / "ca.crt"
    ca.write_bytes(self_signed("ca", ())[0].split(b"-----END CERTIFICATE-----", 1)[1].lstrip())
    loaded = build_configuration(["--root-dir=/tmp/root", *(a.format(ca=ca) for a in argv)])
    settings = run.kubelet_api_settings(loaded.flags, loaded.config, "/tmp/root", loaded.explicit)
    assert settings.address == address and settings.port == 10250
    assert settings.tls.cert_dir == "/tmp/root/pki"


def test_enable_server_false_serves_no_kubelet_api(tmp_path):
    path = tmp_path / "kubelet.yaml"
    path.write_text("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nenableServer: false\n")
    loaded = build_configuration([f"--config={path}"])
    assert run.kubelet_api_settings(loaded.flags, loaded.config, "/tmp/root", loaded.explicit) is None
