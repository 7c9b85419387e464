"""The pykubelet daemon as a subprocess, for end-to-end tests: started through its console
script, addressed by its admin socket and healthz port, always ended at teardown."""

from __future__ import annotations

import hashlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

from tests.support.containerd import cgroup_mount_points, unmount_under

SCRIPTS = Path(sys.executable).parent
# Daemons under test keep their kubepods under here, one cgroup root each (named after the
# root dir, so that a restarted daemon finds its pods' cgroups), all removed at the end of
# this test session (tests/conftest.py) once containerd is gone. One per session: another
# session running at the same time (a second pytest, a benchmark) keeps its own.
TEST_CGROUP_ROOT = f"/pykubelet-test/session-{os.getpid()}"
# Where containerd puts a CRI container whose sandbox names no cgroup parent: /k8s.io/<id>,
# after its CRI namespace (several integration tests and benchmarks make such sandboxes).
# runc removes each container's folder, not this one: removed at the end too, in each
# hierarchy where it was not there when this session began, once empty.
CONTAINERD_DEFAULT_PARENT = "k8s.io"
# Taken when this module is first imported: tests/conftest.py and bench/_support.py do so
# before any containerd starts.
_DEFAULT_PARENT_BEFORE = {m for m in cgroup_mount_points() if os.path.isdir(f"{m}/{CONTAINERD_DEFAULT_PARENT}")}


def cgroup_root_for(root_dir: Path) -> str:
    return f"{TEST_CGROUP_ROOT}/{hashlib.sha256(str(root_dir).encode()).hexdigest()[:12]}"


def remove_test_cgroups() -> Exception | None:
    """Remove this process's TEST_CGROUP_ROOT in every hierarchy, once every runtime and
    daemon that used it is gone (the end of a test session, of a benchmark); None when it
    is gone or was never made, else why it could not be removed. containerd's default
    parent goes too where this session made it and it is empty (rmdir: another session's
    containers in it keep it)."""
    if os.geteuid() != 0:
        return None
    for mount in set(cgroup_mount_points()) - _DEFAULT_PARENT_BEFORE:
        try:
            os.rmdir(f"{mount}/{CONTAINERD_DEFAULT_PARENT}")
        except OSError:
            pass  # never made, or in use
    from pykubelet.ports.cgroups import CgroupError, CgroupManager, detect_cgroup_mode

    mode = detect_cgroup_mode()
    if mode.version == 0:
        return None
    cgroups = CgroupManager(mode)
    problem: Exception | None = None
    for attempt in range(10):  # processes of stopped runtimes may take a moment to go
        try:
            cgroups.destroy(TEST_CGROUP_ROOT)  # nothing to do when it was never made
            return None
        except CgroupError as error:
            problem = error
        time.sleep(0.5)
    return problem


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def console_script(name: str) -> str:
    path = SCRIPTS / name
    if not path.exists():
        raise RuntimeError(f"{path} is missing: install the project with `pip install -e .[test]`")
    return str(path)


class DaemonProcess:
    def __init__(self, root_dir: Path, *args: str) -> None:
        self.root_dir = root_dir
        self.healthz_port = free_port()
        self.port = free_port()  # the kubelet API, on loopback only
        self.log_path = root_dir / "daemon.log"
        self.argv = [
            console_script("pykubelet"),
            "run",
            f"--root-dir={root_dir}",
            f"--healthz-port={self.healthz_port}",
            "--address=127.0.0.1",
            f"--port={self.port}",
            # This project's machines and CI run cgroup v1, which the Go default refuses.
            "--fail-cgroupv1=false",
            f"--cgroup-root={cgroup_root_for(root_dir)}",
            *args,
        ]
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def admin_socket(self) -> str:
        return str(self.root_dir / "pykubelet.sock")

    def start(self) -> DaemonProcess:
        self.root_dir.mkdir(parents=True, exist_ok=True)
        self._log = open(self.log_path, "ab")
        self.process = subprocess.Popen(self.argv, stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        self.wait_for(lambda: self.admin("GET", "/healthz") is not None, "the admin socket to answer")
        return self

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def healthz(self) -> httpx.Response:
        return httpx.get(f"http://127.0.0.1:{self.healthz_port}/healthz", timeout=5)

    def admin(self, method: str, path: str) -> httpx.Response:
        transport = httpx.HTTPTransport(uds=self.admin_socket)
        with httpx.Client(transport=transport, base_url="http://admin", timeout=5) as client:
            return client.request(method, path)

    def inspect(self, *args: str, timeout: float = 20) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [console_script("pykubelet-inspect"), "--socket", self.admin_socket, *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )

    def wait_for(self, condition, what: str, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                raise AssertionError(f"daemon exited ({self.process.returncode}) waiting for {what}:\n{self.log()}")
            try:
                if condition():
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.05)
        raise AssertionError(f"timed out after {timeout}s waiting for {what}:\n{self.log()}")

    def terminate(self, timeout: float = 20.0) -> int:
        assert self.process is not None
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout=timeout)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)
        # The daemon leaves the tmpfs mounts of running pods in place, as it should; the
        # test ends them with its pods.
        unmount_under(self.root_dir)
        if getattr(self, "_log", None):
            self._log.close()
