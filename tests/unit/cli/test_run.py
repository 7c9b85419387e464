"""Which runtime `pykubelet run` picks: the embedded one only when asked, or in standalone
mode when the default endpoint has no socket; cluster mode never falls back."""

from __future__ import annotations

import pytest

from pykubelet.cli import run
from pykubelet.cli.config import build_configuration

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
