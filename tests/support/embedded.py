"""The embedded runtime under a private root dir, for integration tests.

EmbeddedRuntimeInstance starts the runtime through the launcher (as the daemon does) under
a short temp dir in /tmp (unix socket paths are limited to 108 bytes), and at teardown ends
everything it left: the runtime process and every container process group (found from the
state records and from any process that still holds a file under the root dir).

Fixtures (import them into the test module):
- embedded_runtime  an EmbeddedRuntimeInstance, started; cleaned up after the test
- embedded_cri      a CriClient connected to it
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from pykubelet.embedded_runtime import launcher
from pykubelet.ports.cri import CriClient, RuntimeOperationMetrics

__all__ = ["EmbeddedRuntimeInstance", "embedded_runtime", "embedded_cri"]

EMBEDDED_TEST_REQUEST_TIMEOUT = 10.0


_DIR_PREFIX = "pykt-emb-"


class EmbeddedRuntimeInstance:
    def __init__(self, root: str | None = None) -> None:
        # The owner's pid in the name: a later run can tell a leftover of a killed one.
        self.root = root or tempfile.mkdtemp(prefix=f"{_DIR_PREFIX}{os.getpid()}-", dir="/tmp")
        self.endpoint = launcher.endpoint(self.root)
        self.socket = launcher.socket_path(self.root)
        self.log = launcher.log_path(self.root)
        self.state_dir = Path(self.root) / "embedded-runtime" / "state"

    def start(self) -> str:
        return launcher.ensure_running(self.root)

    @property
    def pid(self) -> int | None:
        return launcher.runtime_pid(self.root)

    def kill(self) -> None:
        """kill -9 the runtime process (its containers live on)."""
        pid = self.pid
        assert pid is not None, "the embedded runtime does not run"
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 5
        while launcher.runtime_pid(self.root) is not None and time.monotonic() < deadline:
            time.sleep(0.01)

    def stop(self) -> None:
        """SIGTERM the runtime and wait for it (its containers live on)."""
        launcher.stop(self.root)

    def container_pids(self) -> list[int]:
        pids = []
        for record in self.state_dir.glob("containers/*.json"):
            with contextlib.suppress(OSError, ValueError):
                pid = json.loads(record.read_text()).get("pid", 0)
                if pid:
                    pids.append(pid)
        return pids

    def cleanup(self) -> None:
        pid = self.pid
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        for group in set(self.container_pids()) | set(_processes_using(self.root)):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(group, signal.SIGKILL)
        shutil.rmtree(self.root, ignore_errors=True)


def _processes_using(root: str) -> list[int]:
    """Process groups of the processes that hold a file or their cwd under root (containers
    and the runtime, whatever became of their records)."""
    groups = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        links = []
        with contextlib.suppress(OSError):
            links.append(os.readlink(f"/proc/{entry.name}/cwd"))
        with contextlib.suppress(OSError):
            for fd in os.scandir(f"/proc/{entry.name}/fd"):
                with contextlib.suppress(OSError):
                    links.append(os.readlink(fd.path))
        if any(link.startswith(root + "/") or link == root for link in links):
            with contextlib.suppress(OSError):
                groups.append(os.getpgid(int(entry.name)))
    return [g for g in groups if g != os.getpgid(0)]


def sweep_stale_instances() -> None:
    """End what test processes that died without their teardown (kill -9, a timeout) left:
    the runtime and the containers under each root whose owner is gone."""
    for base in Path("/tmp").glob(f"{_DIR_PREFIX}*"):
        try:
            owner = int(base.name[len(_DIR_PREFIX):].split("-")[0])
        except ValueError:
            continue
        if owner != os.getpid() and not _pid_alive(owner):
            EmbeddedRuntimeInstance(str(base)).cleanup()


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@pytest.fixture
def embedded_runtime() -> Iterator[EmbeddedRuntimeInstance]:
    sweep_stale_instances()
    instance = EmbeddedRuntimeInstance()
    try:
        instance.start()
        yield instance
    finally:
        instance.cleanup()


@pytest.fixture
async def embedded_cri(
    embedded_runtime: EmbeddedRuntimeInstance
) -> AsyncIterator[CriClient]:
    metrics = RuntimeOperationMetrics(CollectorRegistry())
    async with CriClient(
        embedded_runtime.endpoint, request_timeout=EMBEDDED_TEST_REQUEST_TIMEOUT, metrics=metrics
    ) as client:
        yield client
