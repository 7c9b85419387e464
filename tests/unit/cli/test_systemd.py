"""The systemd notifier against a fake NOTIFY_SOCKET (a datagram socket the test reads):
READY=1 once the tree is up and the runtime answered, STATUS= on changes, WATCHDOG=1 every
WATCHDOG_USEC/2 only while the root supervisor answers and the real sync loop is healthy,
STOPPING=1; and the port's reading of the environment. Timed on trio's MockClock."""

from __future__ import annotations

import os
from pathlib import Path
import uuid

import msgspec
import pytest
import trio

from pykubelet.actors.health import Check, HealthBoard
from pykubelet.actors.pleg import RuntimePods
from pykubelet.actors.pod_statuses import PodStatuses
from pykubelet.actors.sync_loop import SyncLoopSettings, sync_loop_actor
from pykubelet.cli.config import ConfigurationError, build_configuration
from pykubelet.cli.systemd import ServiceNotifier, TreeStarted, notifier_socket, service_status
from pykubelet.messages.pod import Pod, PodStatus
from pykubelet.messages.pod_updates import PodUpdate, SyncLoopMessage
from pykubelet.ports.systemd_notify import NotifySocket, WatchdogConfigError, watchdog_interval
from pykubelet.supervisor import ChildSpec, MailboxSpec, Supervisor
from tests.support import systemd as support

WATCHDOG_USEC = "60000000"  # WatchdogSec=60: a ping every 30 s


class FakeSystemd(support.FakeSystemd):
    async def collect(self, into: list[tuple[float, str]]) -> None:
        """Read as systemd does, every second (a unix datagram queue holds only a few),
        noting when each message was seen."""
        while True:
            into.extend((trio.current_time(), m) for m in self.received())
            await trio.sleep(1)


@pytest.fixture
def systemd(tmp_path):
    fake = FakeSystemd(str(tmp_path / "notify"))
    yield fake
    fake.close()


def test_notify_sends_one_datagram_to_a_path_socket(systemd):
    sock = NotifySocket.from_environment({"NOTIFY_SOCKET": systemd.address})
    assert sock.notify("READY=1", "STATUS=3 pods running, runtime ready")
    assert systemd.received() == ["READY=1\nSTATUS=3 pods running, runtime ready"]


def test_notify_reaches_an_abstract_socket():
    fake = FakeSystemd(f"@pykubelet-test-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    try:
        assert NotifySocket.from_environment({"NOTIFY_SOCKET": fake.address}).notify("WATCHDOG=1")
        assert fake.received() == ["WATCHDOG=1"]
    finally:
        fake.close()


def test_without_notify_socket_nothing_is_notified():
    assert NotifySocket.from_environment({}) is None
    assert notifier_socket({"WATCHDOG_USEC": "bad"}) == (None, None)  # not under systemd: not read
    assert NotifySocket.from_environment({"NOTIFY_SOCKET": "vsock:2:1234"}) is None


def test_a_lost_notification_is_not_an_error(tmp_path):
    assert NotifySocket(str(tmp_path / "nobody-listens")).notify("READY=1") is False


def test_watchdog_interval_is_half_of_watchdog_usec_for_this_process_only():
    assert watchdog_interval({"WATCHDOG_USEC": WATCHDOG_USEC}) == 30.0
    assert watchdog_interval({"WATCHDOG_USEC": WATCHDOG_USEC, "WATCHDOG_PID": str(os.getpid())}) == 30.0
    assert watchdog_interval({"WATCHDOG_USEC": WATCHDOG_USEC, "WATCHDOG_PID": "1"}, pid=4242) is None
    assert watchdog_interval({}) is None
    for bad in ("abc", "0", "-5"):
        with pytest.raises(WatchdogConfigError, match=f"WATCHDOG_USEC={bad}: not a positive number"):
            watchdog_interval({"WATCHDOG_USEC": bad})
    with pytest.raises(ConfigurationError, match="WATCHDOG_USEC=abc"):
        notifier_socket({"NOTIFY_SOCKET": "/run/none", "WATCHDOG_USEC": "abc"})


def test_status_line_names_pods_runtime_and_failing_checks():
    ready = Check("runtime", True, "containerd 1.6.20: RuntimeReady")
    assert service_status(3, [ready]) == "3 pods running, runtime ready"
    assert service_status(1, [ready, Check("syncloop", True, "syncing")]) == "1 pod running, runtime ready"
    assert service_status(0, []) == "0 pods running, runtime not connected"
    assert (service_status(0, [Check("runtime", False, "no CRI runtime answers"), Check("pleg", False, "late")])
            == "0 pods running, runtime not ready: no CRI runtime answers; failing: pleg")


def a_pod(uid: str) -> Pod:
    return msgspec.convert({"metadata": {"name": f"p-{uid}", "namespace": "default", "uid": uid},
                            "spec": {"containers": [{"name": "c", "image": "busybox"}]}}, Pod)


class Node:
    """The real sync loop under a root supervisor, with pod workers stuck in a call that
    never returns (a hung CRI call): they never read their mailboxes."""

    def __init__(self, systemd: FakeSystemd) -> None:
        self.health = HealthBoard()
        self.statuses = PodStatuses()
        self.runtime = trio.Event()
        self.let_go = trio.Event()  # the stubborn child stops only once this is set

        def stuck_worker(uid, spec):
            async def run(ctx):
                await trio.sleep_forever()
            return run

        async def stubborn(ctx):
            try:
                await trio.sleep_forever()
            finally:
                with trio.CancelScope(shield=True):  # a child that does not stop (until let go)
                    await self.let_go.wait()

        self.root = Supervisor("root", [
            Supervisor.child_spec("pod-workers", []),
            ChildSpec("sync-loop", sync_loop_actor(
                SyncLoopSettings(sync_frequency=60), tree=lambda: self.root, worker_actor=stuck_worker,
                statuses=self.statuses, runtime_pods=RuntimePods(), health=self.health),
                mailbox=MailboxSpec(capacity=1024, durable=True, accepts=SyncLoopMessage.__args__)),
            ChildSpec("stubborn", stubborn),
        ])
        self.notifier = ServiceNotifier(
            NotifySocket(systemd.address), root=self.root, health=self.health, statuses=self.statuses,
            runtime_answered=self.runtime.wait, watchdog=watchdog_interval({"WATCHDOG_USEC": WATCHDOG_USEC}),
        )

    async def start(self, nursery) -> None:
        nursery.start_soon(self._let_go_at_teardown)
        started = TreeStarted()
        nursery.start_soon(self.notifier.run, started)
        await nursery.start(self.root.run)
        started.started()

    async def _let_go_at_teardown(self) -> None:
        try:
            await trio.sleep_forever()
        finally:
            self.let_go.set()

    async def wedge_sync_loop(self) -> None:
        """Fill a stuck worker's mailbox (16), then have the loop wait to tell it to terminate."""
        sync_loop = self.root.registry.lookup("root/sync-loop")
        await sync_loop.send(PodUpdate(op="ADD", source="file", pods=[a_pod("a")]))
        for _ in range(17):
            await sync_loop.send(PodUpdate(op="UPDATE", source="file", pods=[a_pod("a")]))
        await sync_loop.send(PodUpdate(op="REMOVE", source="file", pods=[a_pod("a")]))


def not_pings(systemd: FakeSystemd) -> list[str]:
    return [m for m in systemd.received() if m != "WATCHDOG=1"]


async def test_ready_once_the_runtime_answered_then_status_changes(systemd, nursery, autojump_clock):
    node = Node(systemd)
    await node.start(nursery)
    await trio.sleep(5.5)
    # The tree is up, the runtime has not answered: no READY, but systemctl status says why.
    assert not_pings(systemd) == ["STATUS=0 pods running, runtime not connected"]
    node.health.report("runtime", True, "containerd: RuntimeReady")
    node.runtime.set()
    await trio.sleep(0.25)  # t=5.75: between two looks (every second from t=0)
    assert not_pings(systemd) == ["READY=1\nSTATUS=0 pods running, runtime ready"]
    node.statuses.set(a_pod("a"), PodStatus(phase="Running"))
    await trio.sleep(1)  # the look at t=6 sees it
    assert not_pings(systemd) == ["STATUS=1 pod running, runtime ready"]
    await trio.sleep(3)
    assert not_pings(systemd) == []  # no change, no line
    node.notifier.stopping("SIGTERM")
    assert not_pings(systemd) == ["STOPPING=1\nSTATUS=stopping: SIGTERM"]
    node.statuses.remove("a")
    await trio.sleep(3)
    assert not_pings(systemd) == []  # the stopping line stays what systemctl status shows


async def test_watchdog_every_half_period_stops_when_the_sync_loop_wedges(systemd, nursery, autojump_clock):
    node = Node(systemd)
    seen: list[tuple[float, str]] = []
    nursery.start_soon(systemd.collect, seen)
    await node.start(nursery)
    node.health.report("runtime", True, "containerd: RuntimeReady")
    node.runtime.set()
    await trio.sleep(10)
    await node.wedge_sync_loop()  # at t=10: the loop never handles another message
    await trio.sleep_until(600)
    pings = [at for at, m in seen if m == "WATCHDOG=1"]
    # Every 30 s from t=0 while the sync loop's check holds; it fails at t=320 (idle > 300 s).
    assert pings == [pytest.approx(t, abs=1) for t in range(0, 301, 30)]
    assert [m for at, m in seen if at > 300 and m.startswith("STATUS")] == [
        "STATUS=0 pods running, runtime ready; failing: syncloop"]


def pings(systemd: FakeSystemd) -> list[str]:
    return [m for m in systemd.received() if m == "WATCHDOG=1"]


async def test_watchdog_stops_while_the_root_supervisor_does_not_answer(systemd, nursery, autojump_clock):
    node = Node(systemd)
    await node.start(nursery)
    await trio.sleep(1)
    assert pings(systemd) == ["WATCHDOG=1"]  # fed before READY: the tree is up
    nursery.start_soon(node.root.restart_child, "stubborn")  # its loop now waits for a child that never stops
    await trio.sleep(100)
    assert pings(systemd) == []
    node.let_go.set()  # at t=101 the child stops at last: the root answers again
    await trio.sleep(30)
    # The check begun at t=90 is answered at once (t=101), the next one at t=120.
    assert pings(systemd) == ["WATCHDOG=1", "WATCHDOG=1"]


CONTRIB = Path(__file__).resolve().parents[3] / "contrib" / "systemd"


def unit_settings(path: Path) -> dict[str, list[str]]:
    settings: dict[str, list[str]] = {}
    for line in path.read_text().splitlines():
        if "=" in line and not line.startswith(("#", "[")):
            key, _, value = line.partition("=")
            settings.setdefault(key, []).append(value)
    return settings


def test_the_unit_is_type_notify_with_watchdog_restart_always_and_leaves_containers_alone():
    unit = unit_settings(CONTRIB / "pykubelet.service")
    assert unit["Type"] == ["notify"] and unit["Restart"] == ["always"] and unit["KillMode"] == ["process"]
    assert int(unit["WatchdogSec"][0]) >= 20  # a ping every WatchdogSec/2: no more often than every 10 s


def test_the_drop_in_flags_are_flags_pykubelet_run_takes(tmp_path):
    drop_in = unit_settings(CONTRIB / "pykubelet.service.d" / "10-flags.conf")
    assert drop_in["ExecStart"][0] == ""  # cleared, then set again
    env = dict(value.strip('"').split("=", 1) for value in drop_in["Environment"])
    env["PYKUBELET_EXTRA_ARGS"] = f"--root-dir={tmp_path} --v=2"
    words = drop_in["ExecStart"][1].split()
    assert words[:2] == ["/opt/pykubelet/bin/pykubelet", "run"]
    argv = [w for word in words[2:] for w in (env[word[1:]].split() if word.startswith("$") else [word])]
    loaded = build_configuration(argv)
    assert loaded.config.static_pod_path == "/etc/kubernetes/manifests"
    assert loaded.flags.root_dir == str(tmp_path)
