"""`pykubelet run --runonce` end to end: the static pods run once through the real tree on a
private containerd and on the embedded runtime; the command prints a line per pod and exits
0 when every pod reached its goal, 1 naming those that did not, 2 for a bad manifest before
anything starts. Containers keep running after the exit."""

from __future__ import annotations

import json
import os
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import grpc
import pytest
from cri_api.v1 import api_pb2, api_pb2_grpc

from tests.support.daemon import DaemonProcess, free_port
from tests.support.pods import TRAPPING_LOOP, container, pod_manifest, write_manifest

MISSING_IMAGE = "127.0.0.1:5999/missing:1"  # a registry on loopback that is not there


def run_once(root_dir: Path, manifests: Path, *extra: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    # Both inside the root dir, which the test's fixture removes (its parent may be /tmp).
    root_dir.mkdir(parents=True, exist_ok=True)
    config = root_dir / "runonce-kubelet.yaml"
    config.write_text("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
                      f"podLogsDir: {root_dir / 'pod-logs'}\n")
    argv = DaemonProcess(root_dir, f"--config={config}", f"--pod-manifest-path={manifests}",
                         "--hostname-override=node1", "--runonce", *extra).argv
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)


def lines(result: subprocess.CompletedProcess[str]) -> dict[str, str]:
    """stdout's result lines by pod name."""
    return {line.split()[0]: line for line in result.stdout.splitlines() if line.strip()}


def running_containers(socket: str) -> dict[str, str]:
    """Container name -> state, of what the runtime holds now."""
    with grpc.insecure_channel(f"unix://{socket}") as channel:
        listed = api_pb2_grpc.RuntimeServiceStub(channel).ListContainers(api_pb2.ListContainersRequest(), timeout=10)
    return {c.metadata.name: api_pb2.ContainerState.Name(c.state) for c in listed.containers}


def sandboxes(socket: str) -> int:
    with grpc.insecure_channel(f"unix://{socket}") as channel:
        return len(api_pb2_grpc.RuntimeServiceStub(channel).ListPodSandbox(api_pb2.ListPodSandboxRequest(), timeout=10).items)


@pytest.fixture
def manifests(tmp_path):
    path = tmp_path / "manifests"
    path.mkdir()
    return path


@pytest.mark.containerd
def test_runonce_on_containerd_every_pod_up_exits_0_and_containers_keep_running(clean_containerd, tmp_path, manifests):
    write_manifest(manifests, pod_manifest("web", [container("web", TRAPPING_LOOP)]))
    write_manifest(manifests, pod_manifest("job", [container("job", ["sh", "-c", "exit 0"])], restartPolicy="Never"))
    result = run_once(tmp_path / "root", manifests, f"--container-runtime-endpoint={clean_containerd.endpoint}")
    assert result.returncode == 0, result.stdout + result.stderr
    by_pod = lines(result)
    assert set(by_pod) == {"default/web-node1", "default/job-node1"}
    assert "Running" in by_pod["default/web-node1"] and "1/1 containers running" in by_pod["default/web-node1"]
    # A pod that runs to completion reached its goal whether seen running or Succeeded (Go).
    assert by_pod["default/job-node1"].split()[1] in ("Running", "Succeeded")
    assert "2 pods started" in result.stderr
    # The daemon is gone; its container is not.
    assert running_containers(clean_containerd.socket)["web"] == "CONTAINER_RUNNING"


@pytest.mark.containerd
def test_runonce_on_containerd_with_an_image_missing_exits_1_naming_the_pod(clean_containerd, tmp_path, manifests):
    write_manifest(manifests, pod_manifest("web", [container("web", TRAPPING_LOOP)]))
    write_manifest(manifests, pod_manifest("broken", [{"name": "app", "image": MISSING_IMAGE, "command": ["true"]}]))
    result = run_once(tmp_path / "root", manifests, f"--container-runtime-endpoint={clean_containerd.endpoint}")
    assert result.returncode == 1, result.stdout + result.stderr
    by_pod = lines(result)
    assert "Running" in by_pod["default/web-node1"]
    assert "Failed" in by_pod["default/broken-node1"]
    assert "container app: ErrImagePull" in by_pod["default/broken-node1"]
    assert "1 of 2 pods did not reach their goal: default/broken-node1" in result.stderr


@pytest.mark.containerd
def test_runonce_with_a_bad_manifest_exits_2_before_anything_starts(clean_containerd, tmp_path, manifests):
    write_manifest(manifests, pod_manifest("web", [container("web", TRAPPING_LOOP)]))
    (manifests / "bad.yaml").write_text("apiVersion: v1\nkind: Pod\nmetadata: {name: bad}\nspec: {containers: [{name: c}]}\n")
    result = run_once(tmp_path / "root", manifests, f"--container-runtime-endpoint={clean_containerd.endpoint}")
    assert result.returncode == 2, result.stdout + result.stderr
    assert f"manifest {manifests / 'bad.yaml'}: spec.containers[0].image" in result.stderr
    assert result.stdout == ""
    assert sandboxes(clean_containerd.socket) == 0  # not even the good pod started


def test_runonce_with_kubeconfig_is_refused(tmp_path, manifests):
    result = run_once(tmp_path / "root", manifests, "--kubeconfig=/etc/kubernetes/kubelet.conf")
    assert result.returncode == 2
    assert "--kubeconfig /etc/kubernetes/kubelet.conf cannot be used with it" in result.stderr


def test_runonce_on_the_embedded_runtime(embedded_runtime, tmp_path, manifests):
    write_manifest(manifests, pod_manifest("web", [container("web", TRAPPING_LOOP)]))
    # Its main container starts only after the init container, which exits at once.
    write_manifest(manifests, pod_manifest("job", [container("job", ["sh", "-c", "exit 0"])], restartPolicy="Never",
                                           init=[container("setup", ["sh", "-c", "exit 0"])]))
    # Its init container fails, so its main container never runs: the pod ends Failed.
    write_manifest(manifests, pod_manifest("crash", [container("main", TRAPPING_LOOP)], restartPolicy="Never",
                                           init=[container("setup", ["sh", "-c", "exit 3"])]))
    result = run_once(Path(embedded_runtime.root), manifests, "--container-runtime-endpoint=embedded")
    assert result.returncode == 1, result.stdout + result.stderr
    by_pod = lines(result)
    assert "Running" in by_pod["default/web-node1"]
    assert by_pod["default/job-node1"].split()[1] in ("Running", "Succeeded")
    assert "Failed" in by_pod["default/crash-node1"] and "setup exited 3" in by_pod["default/crash-node1"]
    assert "1 of 3 pods did not reach their goal: default/crash-node1" in result.stderr
    # The embedded runtime and the running container outlive the command.
    assert running_containers(embedded_runtime.socket)["web"] == "CONTAINER_RUNNING"
    assert any(os.path.exists(f"/proc/{pid}") for pid in embedded_runtime.container_pids())
    # A second run with other manifests leaves the first run's pods alone (Go's runonce
    # has no housekeeping): only its own pod is judged.
    others = manifests.parent / "others"
    others.mkdir()
    write_manifest(others, pod_manifest("other", [container("other", TRAPPING_LOOP)]))
    again = run_once(Path(embedded_runtime.root), others, "--container-runtime-endpoint=embedded")
    assert again.returncode == 0, again.stdout + again.stderr
    assert list(lines(again)) == ["default/other-node1"]
    assert running_containers(embedded_runtime.socket)["web"] == "CONTAINER_RUNNING"


def test_runonce_bad_manifest_on_the_embedded_runtime_starts_no_runtime(tmp_path, manifests):
    (manifests / "bad.yaml").write_text("apiVersion: v1\nkind: Pod\nmetadata: {name: bad}\nspec: {containers: []}\n")
    root = tmp_path / "root"
    result = run_once(root, manifests, "--container-runtime-endpoint=embedded")
    assert result.returncode == 2, result.stdout + result.stderr
    assert "bad.yaml" in result.stderr and "spec.containers" in result.stderr
    assert not (root / "embedded-runtime").exists()


def test_runonce_fails_a_pod_whose_volume_cannot_be_mounted_without_waiting_the_retries(embedded_runtime, tmp_path, manifests):
    missing = tmp_path / "no-such-dir"
    write_manifest(manifests, pod_manifest(
        "data", [container("app", TRAPPING_LOOP, volumeMounts=[{"name": "d", "mountPath": "/d"}])],
        volumes=[{"name": "d", "hostPath": {"path": str(missing), "type": "Directory"}}],
    ))
    result = run_once(Path(embedded_runtime.root), manifests, "--container-runtime-endpoint=embedded", timeout=60)
    assert result.returncode == 1, result.stdout + result.stderr
    line = lines(result)["default/data-node1"]
    assert "Failed" in line and "FailedMount" in line and str(missing) in line


@pytest.fixture
def manifest_server():
    """A PodList served on 127.0.0.1 (set `body` before the request)."""

    class Handler(BaseHTTPRequestHandler):
        body = b""

        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Length", str(len(Handler.body)))
            self.end_headers()
            self.wfile.write(Handler.body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server, Handler
    server.shutdown()
    server.server_close()


def test_runonce_from_a_manifest_url_names_a_pod_refused_at_admission(embedded_runtime, tmp_path, manifest_server):
    server, handler = manifest_server
    handler.body = json.dumps({"apiVersion": "v1", "kind": "PodList", "items": [
        pod_manifest("first", [container("first", TRAPPING_LOOP)]),
        pod_manifest("second", [container("second", TRAPPING_LOOP)]),
    ]}).encode()
    url = f"http://127.0.0.1:{server.server_address[1]}/pods"
    empty = tmp_path / "empty"
    empty.mkdir()
    result = run_once(Path(embedded_runtime.root), empty, f"--manifest-url={url}", "--max-pods=1",
                      "--container-runtime-endpoint=embedded")
    assert result.returncode == 1, result.stdout + result.stderr
    by_pod = lines(result)
    assert sorted(by_pod) == ["default/first-node1", "default/second-node1"]
    assert "Running" in by_pod["default/first-node1"]
    assert "Rejected" in by_pod["default/second-node1"] and "OutOfpods" in by_pod["default/second-node1"]


def test_runonce_from_a_manifest_url_that_does_not_answer_exits_1_before_anything_starts(tmp_path, manifests):
    root = tmp_path / "root"
    result = run_once(root, manifests, f"--manifest-url=http://127.0.0.1:{free_port()}/pods",
                      "--container-runtime-endpoint=embedded")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "--manifest-url http://127.0.0.1:" in result.stderr and "cannot connect" in result.stderr
    assert not (root / "embedded-runtime").exists()
