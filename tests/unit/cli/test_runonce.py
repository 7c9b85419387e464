"""--runonce's wait on the tree's boards, timed on trio's MockClock: Go's retry rule (look now,
then after 1 s doubling, give up after 10 retries), the first complete set from the sources,
the runtime's first answer; and what it refuses before anything starts."""

from __future__ import annotations

import io

import pytest
import trio

from prometheus_client import CollectorRegistry

from pykubelet.actors.events import EventRecorder, pod_reference
from pykubelet.actors.pod_statuses import PodStatuses
from pykubelet.actors.root import DaemonSettings
from pykubelet.actors.runtime_link import RuntimeHandle, RuntimeLinkSettings
from pykubelet.actors.sync_loop import DesiredPods
from pykubelet.cli import runonce
from pykubelet.cli.config import ConfigurationError, build_configuration
from pykubelet.cli.runonce import RunOnceFailed, read_manifests, refuse_unsupported, report, wait_for_pods
from pykubelet.pods.run_once import Verdict
from pykubelet.supervisor import RestartIntensityExceeded
from tests.unit.pods.test_run_once import RUNNING, pod, waiting


class Tree:
    """The boards --runonce reads, as the actors fill them."""

    def __init__(self) -> None:
        self.runtime = RuntimeHandle("unix:///run/test.sock")
        self.runtime._connected.set()  # the runtime link's first answer
        self.desired = DesiredPods()
        self.statuses = PodStatuses()

    def sources_ready(self, *uids: str, rejected: tuple[str, ...] = ()) -> None:
        self.desired.uids, self.desired.rejected = frozenset(uids), frozenset(rejected)
        self.desired.sources_ready = True

    async def wait(self, **kw):
        return await wait_for_pods(runtime=self.runtime, desired=self.desired, statuses=self.statuses, **kw)

    def publish(self, p):
        self.statuses.set(p, p.status)


async def at(seconds: float, action) -> None:
    await trio.sleep_until(seconds)
    action()


async def test_a_pod_running_at_5s_is_seen_at_the_check_at_7s(autojump_clock):
    tree = Tree()
    tree.sources_ready("u1")
    tree.publish(pod("Pending", {"app": waiting("ContainerCreating")}))
    async with trio.open_nursery() as nursery:
        nursery.start_soon(at, 5, lambda: tree.publish(pod("Running", {"app": RUNNING})))
        results = await tree.wait()
        assert trio.current_time() == 7  # looks at 0, 1, 3, 7
    assert results == [("default/web-node1", Verdict("Running", "1/1 containers running"))]


async def test_a_pod_never_running_fails_after_ten_retries_1023s(autojump_clock):
    tree = Tree()
    tree.sources_ready("u1")
    tree.publish(pod("Pending", {"app": waiting("ContainerCreating")}))
    [(name, verdict)] = await tree.wait()
    assert trio.current_time() == 1023  # 1 + 2 + ... + 512
    assert verdict.outcome == "Failed" and "after 10 retries" in verdict.detail


async def test_a_sync_error_fails_the_pod_at_the_next_look(autojump_clock):
    tree = Tree()
    tree.sources_ready("u1")
    async with trio.open_nursery() as nursery:
        nursery.start_soon(at, 2, lambda: tree.publish(pod("Pending", {"app": waiting("ErrImagePull", "not found")})))
        [(name, verdict)] = await tree.wait()
    assert trio.current_time() == 3
    assert verdict == Verdict("Failed", "container app: ErrImagePull: not found")


async def test_a_failed_mount_recorded_by_the_worker_fails_the_pod_at_the_next_look(autojump_clock):
    tree = Tree()
    tree.sources_ready("u1")
    p = pod("Pending", {"app": waiting("ContainerCreating")})
    tree.publish(p)
    events = EventRecorder(CollectorRegistry(), host="node1")
    events.record(pod_reference(p), "Normal", "Pulled", "image present")
    async with trio.open_nursery() as nursery:
        nursery.start_soon(at, 2, lambda: events.record(pod_reference(p), "Warning", "FailedMount", "hostPath /d: missing"))
        [(name, verdict)] = await tree.wait(events=events)
    assert trio.current_time() == 3
    assert verdict == Verdict("Failed", "FailedMount: hostPath /d: missing")


async def test_rejected_pods_are_judged_at_once_and_pods_are_named(autojump_clock):
    tree = Tree()
    tree.sources_ready("u1", rejected=("u2",))
    tree.publish(pod("Running", {"app": RUNNING}))
    refused = pod("Failed", {}, reason="OutOfpods", message="too many pods")
    refused.metadata.uid, refused.metadata.name = "u2", "extra-node1"
    tree.publish(refused)
    results = await tree.wait()
    assert trio.current_time() == 0
    assert [(name, v.outcome) for name, v in results] == [("default/extra-node1", "Rejected"), ("default/web-node1", "Running")]


async def test_no_complete_set_within_the_manifest_delay_fails(autojump_clock):
    tree = Tree()
    with pytest.raises(RunOnceFailed, match="no complete set of pods from the sources after 1s"):
        await tree.wait()
    assert trio.current_time() == pytest.approx(1.0)


async def test_the_wait_for_sources_starts_once_the_runtime_answered(autojump_clock):
    tree = Tree()
    tree.runtime._connected = trio.Event()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(at, 30, tree.runtime._connected.set)
        nursery.start_soon(at, 30.5, lambda: tree.sources_ready())
        assert await tree.wait() == []
    assert trio.current_time() == pytest.approx(30.5, abs=0.02)


async def test_a_runtime_that_never_answers_fails(autojump_clock):
    tree = Tree()
    tree.runtime._connected = trio.Event()
    with pytest.raises(RunOnceFailed, match="runtime at unix:///run/test.sock did not answer within 2m0s"):
        await tree.wait(runtime_timeout=120)


def test_report_prints_a_line_per_pod_and_names_the_failed(capsys):
    out = io.StringIO()
    code = report([("default/a-n", Verdict("Running", "1/1 containers running")),
                   ("default/bb-n", Verdict("Failed", "container app: ErrImagePull"))], out)
    assert code == 1
    assert out.getvalue().splitlines() == [
        "default/a-n   Running    1/1 containers running",
        "default/bb-n  Failed     container app: ErrImagePull",
    ]
    assert "1 of 2 pods did not reach their goal: default/bb-n" in capsys.readouterr().err
    assert report([("default/a-n", Verdict("Succeeded", "done"))], io.StringIO()) == 0


def test_kubeconfig_is_refused_with_runonce(tmp_path):
    loaded = build_configuration(["--runonce", f"--pod-manifest-path={tmp_path}", "--kubeconfig=/etc/k.conf"])
    with pytest.raises(ConfigurationError, match="--kubeconfig /etc/k.conf cannot be used with it"):
        refuse_unsupported(loaded.flags, loaded.config, loaded.explicit)


def test_runonce_needs_a_source():
    loaded = build_configuration(["--runonce"])
    with pytest.raises(ConfigurationError, match="needs --pod-manifest-path or --manifest-url"):
        refuse_unsupported(loaded.flags, loaded.config, loaded.explicit)


def test_ports_given_with_runonce_are_named_as_not_used(tmp_path):
    loaded = build_configuration(["--runonce", f"--pod-manifest-path={tmp_path}", "--port=10251"])
    assert refuse_unsupported(loaded.flags, loaded.config, loaded.explicit) == [
        "--runonce serves no kubelet API and no healthz (as the Go kubelet): port not used"]


def test_a_bad_manifest_is_a_configuration_error_naming_file_and_field(tmp_path):
    (tmp_path / "bad.yaml").write_text("apiVersion: v1\nkind: Pod\nmetadata: {name: bad}\nspec: {containers: [{name: c}]}\n")
    loaded = build_configuration(["--runonce", f"--pod-manifest-path={tmp_path}"])
    with pytest.raises(ConfigurationError, match=r"manifest .*bad.yaml: spec.containers\[0\].image"):
        read_manifests(loaded.config, "node1")


def test_a_missing_manifest_path_is_a_configuration_error(tmp_path):
    loaded = build_configuration(["--runonce", f"--pod-manifest-path={tmp_path / 'nope'}"])
    with pytest.raises(ConfigurationError, match="does not exist"):
        read_manifests(loaded.config, "node1")


def test_the_flag_parses_as_go_spells_it(tmp_path):
    assert build_configuration(["--runonce"]).flags.run_once is True
    assert build_configuration(["--runonce=false"]).flags.run_once is False



def test_the_tree_runs_without_its_ports():
    settings = runonce.runonce_settings(DaemonSettings(root_dir="/r", runtime=RuntimeLinkSettings("unix:///r.sock")))
    assert (settings.healthz_port, settings.kubelet_api) == (0, None)


def test_run_once_in_the_config_file_is_named_as_not_read(tmp_path):
    config = tmp_path / "kubelet.yaml"
    config.write_text("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nrunOnce: true\n")
    loaded = build_configuration([f"--config={config}"])
    assert loaded.flags.run_once is False
    assert [w for w in loaded.warnings if "runOnce" in w] == [
        f"--config {config}: ignoring field runOnce: pass --runonce on the command line to run the static "
        "pods once (the Go kubelet refuses the field since it removed --runonce)"]


async def test_a_root_supervisor_that_gives_up_ends_the_run_with_exit_1(monkeypatch, capsys, autojump_clock):
    class GivingUp(Tree):
        def __init__(self, settings, containers=None) -> None:
            super().__init__()
            self.runtime._connected = trio.Event()  # never answers: only the give-up ends the wait
            self.events = None

        async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
            task_status.started()
            await trio.sleep(5)
            raise RestartIntensityExceeded("root", 11, 30, "sync-loop", ValueError("boom"))

    monkeypatch.setattr(runonce, "Daemon", GivingUp)
    settings = DaemonSettings(root_dir="/r", runtime=RuntimeLinkSettings("unix:///r.sock"))
    assert await runonce.run_once(settings) == 1
    assert trio.current_time() == 5
    assert "--runonce: the root supervisor gave up: supervisor root gave up" in capsys.readouterr().err
