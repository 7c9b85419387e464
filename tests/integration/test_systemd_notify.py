"""The daemon under a fake systemd: NOTIFY_SOCKET is a datagram socket this test reads.
READY=1 once the tree is up and the runtime answered, STATUS= as pods come up, WATCHDOG=1
every WATCHDOG_USEC/2, STOPPING=1 on SIGTERM, then exit 0."""

from __future__ import annotations

import time
from pathlib import Path

from tests.support import systemd as support
from tests.support.daemon import DaemonProcess
from tests.support.pods import TRAPPING_LOOP, container, pod_manifest, write_manifest


class FakeSystemd(support.FakeSystemd):
    def __init__(self, address: str) -> None:
        super().__init__(address)
        self.messages: list[tuple[float, str]] = []

    def read(self, until, what: str, timeout: float = 30.0) -> None:
        """Read datagrams until `until(messages)` holds, noting when each came."""
        deadline = time.monotonic() + timeout
        while not until([m for _, m in self.messages]):
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}; got {self.messages}")
            self.messages.extend((time.monotonic(), m) for m in self.received())
            time.sleep(0.02)


def test_daemon_tells_systemd_ready_status_watchdog_and_stopping(embedded_runtime, tmp_path, monkeypatch):
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    write_manifest(manifests, pod_manifest("web", [container("web", TRAPPING_LOOP)]))
    systemd = FakeSystemd(str(tmp_path / "notify"))
    monkeypatch.setenv("NOTIFY_SOCKET", systemd.address)
    monkeypatch.setenv("WATCHDOG_USEC", "1000000")  # WatchdogSec=1: a ping every 0.5 s
    daemon = DaemonProcess(Path(embedded_runtime.root), "--container-runtime-endpoint=embedded",
                           f"--pod-manifest-path={manifests}", "--hostname-override=node1").start()
    try:
        systemd.read(lambda ms: any(m.startswith("READY=1") for m in ms), "READY=1")
        ready = next(m for m in [m for _, m in systemd.messages] if m.startswith("READY=1"))
        assert ready.startswith("READY=1\nSTATUS=") and "runtime ready" in ready
        systemd.read(lambda ms: any(m.endswith("STATUS=1 pod running, runtime ready") for m in ms), "the pod to run")
        count = len([m for _, m in systemd.messages if m == "WATCHDOG=1"])
        systemd.read(lambda ms: ms.count("WATCHDOG=1") >= count + 3, "three more watchdog pings")
        pings = [at for at, m in systemd.messages if m == "WATCHDOG=1"]
        gaps = [b - a for a, b in zip(pings[-4:], pings[-3:])]
        assert all(0.2 < gap < 2.0 for gap in gaps), gaps  # every 0.5 s, give or take the machine's load
        assert daemon.terminate() == 0
        systemd.read(lambda ms: any(m.startswith("STOPPING=1") for m in ms), "STOPPING=1", timeout=5)
        assert "STOPPING=1\nSTATUS=stopping: received SIGTERM" in [m for _, m in systemd.messages]
    finally:
        daemon.stop()
        systemd.close()
