"""The README's first command, on the embedded runtime: the example static pod runs, the
daemon can be stopped and started again, and the container lives on untouched."""

from __future__ import annotations

from pathlib import Path

from tests.support.daemon import DaemonProcess
from tests.support.pods import container_status, phase, wait_for_pod

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "static-pods"


def test_example_static_pod_runs_on_the_embedded_runtime_across_a_daemon_restart(embedded_runtime):
    args = ("--container-runtime-endpoint=embedded", f"--pod-manifest-path={EXAMPLES}", "--hostname-override=demo")
    daemon = DaemonProcess(Path(embedded_runtime.root), *args).start()
    try:
        pod = wait_for_pod(daemon, "hello", phase("Running"), "Running")
        table = daemon.inspect("pods")
        assert table.returncode == 0
        assert "hello-demo" in table.stdout and "Running" in table.stdout and "1/1" in table.stdout
        first = container_status(pod, "hello")
        assert daemon.terminate() == 0
    finally:
        daemon.stop()
    again = DaemonProcess(Path(embedded_runtime.root), *args).start()
    try:
        pod = wait_for_pod(again, "hello", phase("Running"), "Running after the restart")
        assert container_status(pod, "hello")["containerID"] == first["containerID"]
        assert container_status(pod, "hello")["restartCount"] == 0
    finally:
        again.stop()
