"""Fixtures shared by the integration tests: a daemon on a manifest directory
(standalone), and a daemon joined to the test API server as node1 (cluster mode)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.daemon import DaemonProcess


@pytest.fixture
def manifests(tmp_path):
    path = tmp_path / "manifests"
    path.mkdir()
    return path


@pytest.fixture
def start_daemon(tmp_path, manifests):
    started: list[DaemonProcess] = []
    config = tmp_path / "kubelet.yaml"
    config.write_text(
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
        f"podLogsDir: {tmp_path / 'pod-logs'}\nfileCheckFrequency: 20s\n"
    )

    def start(endpoint: str, *extra: str, root_dir: Path | None = None) -> DaemonProcess:
        daemon = DaemonProcess(
            root_dir or tmp_path / "root",
            f"--config={config}",
            f"--container-runtime-endpoint={endpoint}",
            f"--pod-manifest-path={manifests}",
            "--hostname-override=node1",
            *extra,
        ).start()
        started.append(daemon)
        return daemon

    yield start
    for daemon in started:
        daemon.stop()


@pytest.fixture
def node_daemon(request, tmp_path, apiserver, containerd):
    """Lines of KubeletConfiguration YAML to add come as an indirect parameter."""
    config = tmp_path / "kubelet.yaml"
    config.write_text(
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
        "nodeStatusUpdateFrequency: 1s\nnodeStatusReportFrequency: 5m\n"
        "nodeLeaseDurationSeconds: 8\n"  # renewed every 2s
        f"podLogsDir: {tmp_path / 'pod-logs'}\n" + getattr(request, "param", "")
    )
    daemon = DaemonProcess(
        tmp_path / "root",
        f"--config={config}",
        f"--kubeconfig={apiserver.kubeconfig('system:node:node1')}",
        f"--container-runtime-endpoint={containerd.endpoint}",
        # The API server's kubelet client certificate is accepted, as in a kubeadm cluster.
        f"--client-ca-file={apiserver.ca_path}",
        "--hostname-override=node1",
        "--node-ip=127.0.0.1",
    ).start()
    yield daemon
    daemon.stop()


