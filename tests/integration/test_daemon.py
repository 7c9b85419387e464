"""The daemon end to end: a subprocess on a private containerd, inspected from outside."""

from __future__ import annotations

import json
import os
import socket
import ssl
import stat
import time
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.daemon import DaemonProcess


@pytest.fixture
def daemon_factory(tmp_path):
    started: list[DaemonProcess] = []

    def start(*args: str, name: str = "root") -> DaemonProcess:
        daemon = DaemonProcess(tmp_path / name, *args).start()
        started.append(daemon)
        return daemon

    yield start
    for daemon in started:
        daemon.stop()


def restarts(daemon: DaemonProcess, path: str) -> int:
    tree = daemon.admin("GET", "/debug/actors").json()

    def find(node):
        if node["path"] == path:
            return node
        for child in node["children"]:
            if (found := find(child)) is not None:
                return found

    return find(tree)["restarts"]


def metric(daemon: DaemonProcess, name: str, **labels: str) -> float:
    text = daemon.admin("GET", "/metrics").text
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return sample.value
    raise AssertionError(f"no sample {name}{labels} in /metrics")


@pytest.mark.containerd
def test_daemon_connects_is_inspected_crashed_restarted_and_stops_on_sigterm(containerd, daemon_factory):
    daemon = daemon_factory(f"--container-runtime-endpoint={containerd.endpoint}", "--enable-fault-injection")
    daemon.wait_for(lambda: daemon.healthz().status_code == 200, "healthz 200")
    assert daemon.healthz().text == "ok"
    assert stat.S_IMODE(os.stat(daemon.admin_socket).st_mode) == 0o600
    verbose = daemon.admin("GET", "/healthz?verbose").text
    assert "[+]runtime ok: containerd" in verbose and "(CRI v1)" in verbose

    tree = daemon.inspect("tree", "-o", "json")
    assert tree.returncode == 0, tree.stderr
    snapshot = json.loads(tree.stdout)
    assert [c["name"] for c in snapshot["children"]] == [
        "runtime-link", "pleg", "pod-workers", "sync-loop", "pod-config", "sources", "gc", "server", "probes",
        "log-rotation", "eviction-manager",
    ]
    drawn = daemon.inspect("tree")
    assert drawn.returncode == 0 and "runtime-link" in drawn.stdout and "running" in drawn.stdout

    crashed = daemon.inspect("crash", "root/runtime-link")
    assert crashed.returncode == 0, crashed.stderr
    daemon.wait_for(lambda: restarts(daemon, "root/runtime-link") == 1, "the runtime link to restart")
    # rest_for_one: the server, started after the link, was restarted with it.
    daemon.wait_for(lambda: restarts(daemon, "root/server") == 1, "the server to restart")
    assert metric(daemon, "pykubelet_actor_restarts_total", actor="root/runtime-link") == 1
    assert metric(daemon, "pykubelet_actor_up", actor="root/runtime-link") == 1
    assert metric(daemon, "kubelet_runtime_operations_total", operation_type="version") >= 2
    assert metric(daemon, "pykubelet_runtime_info", runtime_name="containerd") == 1
    daemon.wait_for(lambda: daemon.healthz().status_code == 200, "healthz 200 after the restart")

    assert daemon.terminate() == 0
    assert not os.path.exists(daemon.admin_socket)
    log = daemon.log()
    assert "received SIGTERM" in log and "Traceback" not in log


@pytest.mark.containerd
def test_runtime_going_away_turns_healthz_500_then_it_reconnects(fresh_containerd, daemon_factory):
    daemon = daemon_factory(f"--container-runtime-endpoint={fresh_containerd.endpoint}")
    daemon.wait_for(lambda: daemon.healthz().status_code == 200, "healthz 200")
    fresh_containerd.kill()
    daemon.wait_for(lambda: daemon.healthz().status_code == 500, "healthz 500 once containerd is gone")
    body = daemon.healthz().text
    assert "[-]runtime failed:" in body and fresh_containerd.socket in body
    assert metric(daemon, "pykubelet_runtime_up") == 0
    fresh_containerd.restart()
    daemon.wait_for(lambda: daemon.healthz().status_code == 200, "healthz 200 after containerd is back")
    assert daemon.process.poll() is None
    assert metric(daemon, "kubelet_runtime_operations_errors_total", operation_type="status") >= 1 or (
        metric(daemon, "kubelet_runtime_operations_errors_total", operation_type="version") >= 1
    )
    assert daemon.terminate() == 0


def test_unreachable_runtime_is_not_fatal_and_healthz_names_it(tmp_path, daemon_factory):
    missing = tmp_path / "no-runtime.sock"
    daemon = daemon_factory(f"--container-runtime-endpoint=unix://{missing}", "--logging-format=json")
    daemon.wait_for(lambda: daemon.healthz().status_code == 500, "healthz 500")
    daemon.wait_for(lambda: str(missing) in daemon.healthz().text, "healthz to name the socket")
    assert "[-]runtime failed" in daemon.healthz().text
    # The console script started itself again as python -OO, in the process it was (cli/command.py).
    cmdline = Path(f"/proc/{daemon.process.pid}/cmdline").read_bytes().split(b"\0")
    assert cmdline[1:4] == [b"-OO", daemon.argv[0].encode(), b"run"]
    pods = daemon.inspect("pods")
    assert pods.returncode == 0 and "No pods" in pods.stdout
    assert daemon.terminate() == 0
    records = [json.loads(line) for line in daemon.log().splitlines() if line.strip()]
    unavailable = [r for r in records if r["msg"].startswith("container runtime unavailable")]
    assert len(unavailable) == 1, "one warning per change of state, not one per retry"
    assert str(missing) in unavailable[0]["msg"]



def test_the_self_signed_certificate_is_served_without_cryptography_in_the_daemon(tmp_path, daemon_factory):
    """The pair is made by a child process (ports/serving_cert.py): cryptography's library
    is never mapped into the daemon, whose kubelet API still serves the certificate."""
    daemon = daemon_factory(f"--container-runtime-endpoint=unix://{tmp_path / 'no-runtime.sock'}")
    cert = daemon.root_dir / "pki" / "kubelet.crt"
    daemon.wait_for(lambda: cert.exists() and _served_certificate(daemon.port) is not None, "the kubelet API over TLS")
    served = ssl.DER_cert_to_PEM_cert(_served_certificate(daemon.port))
    assert served.split("-----END CERTIFICATE-----")[0] == cert.read_text().split("-----END CERTIFICATE-----")[0]
    maps = Path(f"/proc/{daemon.process.pid}/maps").read_text()
    assert "/cryptography/" not in maps
    assert "/grpc/" not in maps  # nor grpcio's: the CRI port speaks gRPC itself (ports/grpc_client)
    assert "/msgspec/" in maps  # the check reads the right process's mappings


def _served_certificate(port: int) -> bytes | None:
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as raw, context.wrap_socket(raw) as tls:
            return tls.getpeercert(binary_form=True)
    except OSError:
        return None

def test_bad_configuration_exits_2_with_one_clear_line(tmp_path):
    import subprocess

    from tests.support.daemon import console_script

    config = tmp_path / "config.yaml"
    config.write_text("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nhealthzPort: abc\n")
    result = subprocess.run(
        [console_script("pykubelet"), "run", f"--config={config}", f"--root-dir={tmp_path / 'root'}"],
        capture_output=True,
        text=True,
        timeout=30,
        stdin=subprocess.DEVNULL,
    )
    assert result.returncode == 2
    assert str(config) in result.stderr and "healthzPort" in result.stderr
    assert "Traceback" not in result.stderr


def test_root_that_gives_up_stops_the_daemon_with_exit_1_and_says_why(tmp_path, daemon_factory):
    import httpx

    daemon = daemon_factory(f"--container-runtime-endpoint=unix://{tmp_path / 'none.sock'}", "--enable-fault-injection")
    crashes = 0
    for _ in range(200):  # bounded: the root gives up after 11 restarts within 30s
        if daemon.process.poll() is not None:
            break
        try:
            if daemon.admin("POST", "/debug/actors/root/runtime-link/crash").status_code == 200:
                crashes += 1
        except httpx.TransportError:
            pass  # the server is being restarted with the link (rest_for_one)
        time.sleep(0.05)
    assert daemon.process.wait(timeout=30) == 1
    assert crashes == 11
    log = daemon.log()
    assert "supervisor root gave up: 11 restarts of root/runtime-link within 30s, the last (InjectedCrash" in log
    assert not os.path.exists(daemon.admin_socket)
