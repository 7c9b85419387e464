"""The embedded runtime through the kubelet's own CriClient, started by the launcher as the
daemon starts it: the calls of test_cri_containerd.py, plus what is its own — host
processes, CRI logs, no images, surviving restarts of itself and of the daemon."""

from __future__ import annotations

import json
import os
import re
import signal
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import grpc
import pytest
import trio
from tests.support import grpc_loop
from cri_api.v1 import api_pb2, api_pb2_grpc

from pykubelet.embedded_runtime import EmbeddedRuntimeError, ensure_running, launcher
from pykubelet.embedded_runtime.processes import live_group_members
from pykubelet.ports.cri import CommandTimedOut, CriCallError, CriClient, CriNotFound
from tests.support.embedded import EmbeddedRuntimeInstance

# Stops at once on TERM.
TRAPPING_LOOP = ["sh", "-c", "trap 'exit 0' TERM; while true; do sleep 0.1; done"]
# Ignores TERM, and so does its child (an ignored signal stays ignored across exec).
IGNORING_TERM = ["sh", "-c", "trap '' TERM; sleep 60"]
TICKER = ["sh", "-c", "trap 'exit 0' TERM; i=0; while true; do echo tick $i; i=$((i+1)); sleep 0.1; done"]
CRI_LOG_LINE = re.compile(rb"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,9})?Z (stdout|stderr) [FP] .*$")


def sandbox_config(name: str, log_directory: str = "") -> api_pb2.PodSandboxConfig:
    return api_pb2.PodSandboxConfig(
        metadata=api_pb2.PodSandboxMetadata(
            name=name, namespace="default", uid=str(uuid.uuid4()), attempt=0
        ),
        labels={"io.kubernetes.pod.name": name},
        log_directory=log_directory,
        linux=api_pb2.LinuxPodSandboxConfig(
            security_context=api_pb2.LinuxSandboxSecurityContext(
                namespace_options=api_pb2.NamespaceOption(network=api_pb2.NODE)
            )
        ),
    )


def container_config(name: str, command: list[str], **fields) -> api_pb2.ContainerConfig:
    return api_pb2.ContainerConfig(
        metadata=api_pb2.ContainerMetadata(name=name, attempt=0),
        image=api_pb2.ImageSpec(image="busybox:1.36"),
        command=command,
        labels={"io.kubernetes.container.name": name},
        **fields,
    )


async def run_container(
    cri: CriClient, pod: str, command: list[str], log_directory: str = "", **fields
) -> tuple[str, str]:
    """A sandbox and a started container in it: (sandbox id, container id)."""
    config = sandbox_config(pod, log_directory)
    sandbox_id = await cri.run_pod_sandbox(config)
    container_id = await cri.create_container(
        sandbox_id, container_config("main", command, **fields), config
    )
    await cri.start_container(container_id)
    return sandbox_id, container_id


async def wait_for_state(cri: CriClient, container_id: str, state: int, within: float = 5):
    with trio.fail_after(within):
        while True:
            status = (await cri.container_status(container_id)).status
            if status.state == state:
                return status
            await trio.sleep(0.02)


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2] not in "ZX"


# -- the handshake -------------------------------------------------------------------------


async def test_version_says_no_isolation_and_no_images(embedded_cri: CriClient) -> None:
    version = embedded_cri.runtime_version
    assert version is not None
    assert version.runtime_name == "pykubelet-embedded"
    assert version.runtime_api_version == "v1"
    assert version.runtime_version.endswith("(no isolation, images not pulled)")
    status = await embedded_cri.status()
    assert status.runtime_ready and status.network_ready


async def test_runtime_log_warns_of_no_isolation_and_no_images(
    embedded_runtime: EmbeddedRuntimeInstance,
) -> None:
    text = Path(embedded_runtime.log).read_text()
    assert "WITHOUT isolation" in text and "pulls no images" in text


# -- a pod's life --------------------------------------------------------------------------


async def test_container_exit_code_and_both_streams_in_the_cri_log(
    embedded_cri: CriClient, embedded_runtime: EmbeddedRuntimeInstance
) -> None:
    logs = os.path.join(embedded_runtime.root, "pods", "life")
    sandbox_id, container_id = await run_container(
        embedded_cri, "life", ["sh", "-c", "echo hello; echo err >&2; exit 3"],
        log_directory=logs, log_path="main/0.log",
    )
    sandbox = await embedded_cri.pod_sandbox_status(sandbox_id)
    assert sandbox.status.state == api_pb2.SANDBOX_READY
    assert sandbox.status.network.ip == "127.0.0.1"

    status = await wait_for_state(embedded_cri, container_id, api_pb2.CONTAINER_EXITED)
    assert (status.exit_code, status.reason) == (3, "Error")
    assert 0 < status.created_at <= status.started_at <= status.finished_at
    assert status.image.image == "busybox:1.36"
    assert status.image_ref == "embedded:busybox:1.36"
    assert status.log_path == os.path.join(logs, "main/0.log")
    assert status.labels["io.kubernetes.container.name"] == "main"

    lines = Path(status.log_path).read_bytes().splitlines()
    assert all(CRI_LOG_LINE.match(line) for line in lines), lines
    assert sorted(line.split(b" ", 1)[1] for line in lines) == [
        b"stderr F err", b"stdout F hello"
    ]

    await embedded_cri.remove_container(container_id)
    with pytest.raises(CriNotFound):
        await embedded_cri.container_status(container_id)
    assert Path(status.log_path).exists(), "the log outlives the container, as with containerd"
    await embedded_cri.stop_pod_sandbox(sandbox_id)
    await embedded_cri.remove_pod_sandbox(sandbox_id)
    assert await embedded_cri.list_pod_sandbox() == []


async def test_container_that_exits_zero_completed(embedded_cri: CriClient) -> None:
    _, container_id = await run_container(embedded_cri, "zero", ["true"])
    status = await wait_for_state(embedded_cri, container_id, api_pb2.CONTAINER_EXITED)
    assert (status.exit_code, status.reason) == (0, "Completed")


async def test_env_args_and_working_dir_reach_the_process(
    embedded_cri: CriClient, embedded_runtime: EmbeddedRuntimeInstance
) -> None:
    logs = os.path.join(embedded_runtime.root, "pods", "env")
    _, container_id = await run_container(
        embedded_cri, "env", ["sh", "-c"], log_directory=logs, log_path="main/0.log",
        args=['echo "$GREETING $1 $(pwd) $PATH"', "arg0", "world"],
        envs=[api_pb2.KeyValue(key="GREETING", value="hi")],
        working_dir="/tmp",
    )
    status = await wait_for_state(embedded_cri, container_id, api_pb2.CONTAINER_EXITED)
    assert status.exit_code == 0
    line = Path(status.log_path).read_text().split(" ", 3)[3]
    assert line.startswith("hi world /tmp /usr/local/sbin:")


async def test_trapping_container_stops_fast_and_ignoring_one_is_killed_at_the_timeout(
    embedded_cri: CriClient,
) -> None:
    _, trapping = await run_container(embedded_cri, "trap", TRAPPING_LOOP)
    _, ignoring = await run_container(embedded_cri, "ignore", IGNORING_TERM)
    await trio.sleep(0.2)  # let the shells install their traps

    started = time.monotonic()
    await embedded_cri.stop_container(trapping, timeout=10)
    assert time.monotonic() - started < 1
    status = (await embedded_cri.container_status(trapping)).status
    assert (status.state, status.exit_code, status.reason) == (api_pb2.CONTAINER_EXITED, 0, "Completed")

    ignoring_pid = int(_verbose_pid(await embedded_cri.container_status(ignoring, verbose=True)))
    started = time.monotonic()
    await embedded_cri.stop_container(ignoring, timeout=1)
    assert 1 <= time.monotonic() - started < 2
    status = (await embedded_cri.container_status(ignoring)).status
    assert (status.state, status.exit_code) == (api_pb2.CONTAINER_EXITED, 128 + signal.SIGKILL)
    assert not alive(ignoring_pid)
    assert live_group_members(ignoring_pid) == [], "the whole process group went, sleep included"


def _verbose_pid(response: api_pb2.ContainerStatusResponse) -> int:
    return json.loads(response.info["info"])["pid"]


async def test_stop_pod_sandbox_kills_its_containers(embedded_cri: CriClient) -> None:
    sandbox_id, container_id = await run_container(embedded_cri, "stoppod", IGNORING_TERM)
    started = time.monotonic()
    await embedded_cri.stop_pod_sandbox(sandbox_id)
    assert time.monotonic() - started < 1, "StopPodSandbox gives no grace period"
    assert (await embedded_cri.container_status(container_id)).status.state == api_pb2.CONTAINER_EXITED
    sandbox = (await embedded_cri.pod_sandbox_status(sandbox_id)).status
    assert sandbox.state == api_pb2.SANDBOX_NOTREADY
    await embedded_cri.remove_pod_sandbox(sandbox_id)
    assert await embedded_cri.list_containers() == []
    await embedded_cri.remove_pod_sandbox(sandbox_id)  # again: not there is fine


async def test_lists_filter_by_id_state_sandbox_and_labels(embedded_cri: CriClient) -> None:
    first_sandbox, running = await run_container(embedded_cri, "one", TRAPPING_LOOP)
    second_sandbox, exited = await run_container(embedded_cri, "two", ["true"])
    await wait_for_state(embedded_cri, exited, api_pb2.CONTAINER_EXITED)

    def ids(items):
        return sorted(item.id for item in items)

    assert ids(await embedded_cri.list_containers()) == sorted([running, exited])
    by_state = api_pb2.ContainerFilter(state=api_pb2.ContainerStateValue(state=api_pb2.CONTAINER_RUNNING))
    assert ids(await embedded_cri.list_containers(by_state)) == [running]
    by_sandbox = api_pb2.ContainerFilter(pod_sandbox_id=second_sandbox)
    assert ids(await embedded_cri.list_containers(by_sandbox)) == [exited]
    by_prefix = api_pb2.ContainerFilter(id=running[:12])
    assert ids(await embedded_cri.list_containers(by_prefix)) == [running]
    by_label = api_pb2.ContainerFilter(label_selector={"io.kubernetes.container.name": "main"})
    assert len(await embedded_cri.list_containers(by_label)) == 2

    await embedded_cri.stop_pod_sandbox(second_sandbox)
    ready = api_pb2.PodSandboxFilter(state=api_pb2.PodSandboxStateValue(state=api_pb2.SANDBOX_READY))
    assert ids(await embedded_cri.list_pod_sandbox(ready)) == [first_sandbox]
    by_pod = api_pb2.PodSandboxFilter(label_selector={"io.kubernetes.pod.name": "two"})
    assert ids(await embedded_cri.list_pod_sandbox(by_pod)) == [second_sandbox]


# -- exec ----------------------------------------------------------------------------------


async def test_exec_sync_returns_output_and_exit_code(embedded_cri: CriClient) -> None:
    _, container_id = await run_container(
        embedded_cri, "exec", TRAPPING_LOOP, envs=[api_pb2.KeyValue(key="WHO", value="me")]
    )
    result = await embedded_cri.exec_sync(
        container_id, ["sh", "-c", "echo out $WHO; echo err >&2; exit 3"], timeout=5
    )
    assert (result.stdout, result.stderr, result.exit_code) == (b"out me\n", b"err\n", 3)


async def test_exec_sync_past_its_timeout_raises_command_timed_out_and_kills_it(
    embedded_cri: CriClient,
) -> None:
    _, container_id = await run_container(embedded_cri, "exectimeout", TRAPPING_LOOP)
    marker = f"sleep 3{uuid.uuid4().int % 1000:03d}"
    started = time.monotonic()
    with pytest.raises(CommandTimedOut) as timed_out:
        await embedded_cri.exec_sync(container_id, ["sh", "-c", marker], timeout=1)
    assert 1 <= time.monotonic() - started < 3
    assert "timed out after 1s" in str(timed_out.value)
    assert subprocess.run(["pgrep", "-f", marker], capture_output=True).stdout == b""


async def test_cancelling_the_caller_cancels_the_exec_in_the_runtime(embedded_cri: CriClient) -> None:
    _, container_id = await run_container(embedded_cri, "execcancel", TRAPPING_LOOP)
    marker = f"sleep 4{uuid.uuid4().int % 1000:03d}"
    with trio.move_on_after(0.3) as scope:
        await embedded_cri.exec_sync(container_id, ["sh", "-c", marker], timeout=60)
    assert scope.cancelled_caught
    with trio.fail_after(2):
        while subprocess.run(["pgrep", "-f", marker], capture_output=True).stdout:
            await trio.sleep(0.02)


async def test_exec_in_an_exited_container_fails(embedded_cri: CriClient) -> None:
    _, container_id = await run_container(embedded_cri, "execexited", ["true"])
    await wait_for_state(embedded_cri, container_id, api_pb2.CONTAINER_EXITED)
    with pytest.raises(CriCallError) as failed:
        await embedded_cri.exec_sync(container_id, ["true"], timeout=5)
    assert "CONTAINER_EXITED" in str(failed.value)


# -- what it cannot do, said clearly ----------------------------------------------------------


async def test_container_without_command_is_refused_clearly(embedded_cri: CriClient) -> None:
    config = sandbox_config("nocommand")
    sandbox_id = await embedded_cri.run_pod_sandbox(config)
    with pytest.raises(CriCallError) as refused:
        await embedded_cri.create_container(sandbox_id, container_config("web", []), config)
    assert refused.value.code == "INVALID_ARGUMENT"
    assert "embedded runtime runs no images: container web needs an explicit command" in str(refused.value)


async def test_command_that_cannot_run_fails_start_and_leaves_a_start_error(
    embedded_cri: CriClient,
) -> None:
    config = sandbox_config("notfound")
    sandbox_id = await embedded_cri.run_pod_sandbox(config)
    container_id = await embedded_cri.create_container(
        sandbox_id, container_config("main", ["no-such-command-here"]), config
    )
    with pytest.raises(CriCallError) as failed:
        await embedded_cri.start_container(container_id)
    assert "'no-such-command-here': executable file not found in $PATH" in str(failed.value)
    status = (await embedded_cri.container_status(container_id)).status
    assert (status.state, status.exit_code, status.reason) == (api_pb2.CONTAINER_EXITED, 128, "StartError")
    assert "executable file not found" in status.message


async def test_images_are_always_present_and_never_pulled(embedded_cri: CriClient) -> None:
    present = await embedded_cri.image_status("registry.example/never/pulled:1")
    assert present.HasField("image")
    assert present.image.id == "embedded:registry.example/never/pulled:1"
    started = time.monotonic()
    assert await embedded_cri.pull_image("127.0.0.1:5999/missing:1") == "embedded:127.0.0.1:5999/missing:1"
    assert time.monotonic() - started < 0.5
    await run_container(embedded_cri, "images", ["true"])
    assert [image.repo_tags[0] for image in await embedded_cri.list_images()] == ["busybox:1.36"]
    await embedded_cri.remove_image("busybox:1.36")
    filesystems = await embedded_cri.image_fs_info()
    assert filesystems.image_filesystems[0].used_bytes.value > 0


# -- raw CRI calls that CriClient does not wrap ----------------------------------------------


async def test_container_events_and_reopened_log(
    embedded_cri: CriClient, embedded_runtime: EmbeddedRuntimeInstance
) -> None:
    async def open_stub():
        channel = grpc.aio.insecure_channel(embedded_runtime.endpoint)
        return channel, api_pb2_grpc.RuntimeServiceStub(channel)

    channel, stub = await grpc_loop.run(open_stub)
    events: list[api_pb2.ContainerEventResponse] = []

    async def collect():
        async for event in stub.GetContainerEvents(api_pb2.GetEventsRequest()):
            events.append(event)

    async def collector():
        await grpc_loop.run(collect)

    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(collector)
            await trio.sleep(0.2)
            logs = os.path.join(embedded_runtime.root, "pods", "events")
            sandbox_id, container_id = await run_container(
                embedded_cri, "events", TICKER, log_directory=logs, log_path="main/0.log"
            )
            log_file = Path(logs, "main/0.log")
            await trio.sleep(0.3)
            os.rename(log_file, log_file.with_suffix(".rotated"))
            await grpc_loop.run(
                stub.ReopenContainerLog,
                api_pb2.ReopenContainerLogRequest(container_id=container_id)
            )
            await trio.sleep(0.3)
            await embedded_cri.stop_container(container_id, timeout=5)
            await embedded_cri.remove_container(container_id)
            await trio.sleep(0.1)
            nursery.cancel_scope.cancel()
    finally:
        await grpc_loop.run(channel.close)

    kinds = [(e.container_id, e.container_event_type) for e in events if e.container_id == container_id]
    assert kinds == [
        (container_id, api_pb2.CONTAINER_CREATED_EVENT),
        (container_id, api_pb2.CONTAINER_STARTED_EVENT),
        (container_id, api_pb2.CONTAINER_STOPPED_EVENT),
        (container_id, api_pb2.CONTAINER_DELETED_EVENT),
    ]
    sandbox_events = [e.container_event_type for e in events if e.container_id == sandbox_id]
    assert sandbox_events == [api_pb2.CONTAINER_CREATED_EVENT]  # as containerd: its own id
    started = next(e for e in events if e.container_event_type == api_pb2.CONTAINER_STARTED_EVENT
                   and e.container_id == container_id)
    assert started.pod_sandbox_status.metadata.name == "events"
    assert [s.id for s in started.containers_statuses] == [container_id]
    assert b"stdout F tick 0" in log_file.with_suffix(".rotated").read_bytes()
    assert b"stdout F tick" in log_file.read_bytes(), "after ReopenContainerLog, lines go to the new file"


# -- the runtime's own life ------------------------------------------------------------------


def test_ensure_running_twice_reuses_the_live_runtime(embedded_runtime: EmbeddedRuntimeInstance) -> None:
    pid = embedded_runtime.pid
    assert pid is not None
    started = time.monotonic()
    assert ensure_running(embedded_runtime.root) == embedded_runtime.endpoint
    assert time.monotonic() - started < 0.1
    assert embedded_runtime.pid == pid
    runtimes = subprocess.run(
        ["pgrep", "-f", f"pykubelet.embedded_runtime --root {embedded_runtime.root} "],
        capture_output=True, text=True,
    ).stdout.split()
    assert runtimes == [str(pid)]


def test_second_runtime_for_the_same_root_refuses_to_start(
    embedded_runtime: EmbeddedRuntimeInstance,
) -> None:
    other_socket = os.path.join(embedded_runtime.root, "other.sock")
    result = subprocess.run(
        [sys.executable, "-m", "pykubelet.embedded_runtime", "--root", embedded_runtime.root,
         "--socket", other_socket],
        capture_output=True, text=True, timeout=10,
    )
    assert result.returncode == 1
    assert "another embedded runtime process holds" in result.stderr


def test_runtime_that_cannot_start_names_its_log(tmp_path: Path) -> None:
    root = tmp_path / ("x" * 120)
    with pytest.raises(EmbeddedRuntimeError) as too_long:
        ensure_running(str(root))
    assert "more than a unix socket allows" in str(too_long.value)

    blocked = Path(f"/tmp/pykt-emb-blocked-{os.getpid()}")
    (blocked / "embedded-runtime").mkdir(parents=True, exist_ok=True)
    (blocked / "embedded-runtime" / "state").write_text("a file where a folder must be")
    try:
        with pytest.raises(EmbeddedRuntimeError) as failed:
            ensure_running(str(blocked))
        assert "exited with code 1" in str(failed.value)
        assert launcher.log_path(blocked) in str(failed.value)
    finally:
        shutil.rmtree(blocked, ignore_errors=True)


async def test_killed_runtime_restarts_and_adopts_the_running_container(
    embedded_runtime: EmbeddedRuntimeInstance
) -> None:
    logs = os.path.join(embedded_runtime.root, "pods", "adopt")
    async with CriClient(embedded_runtime.endpoint, request_timeout=10) as cri:
        _, container_id = await run_container(
            cri, "adopt", TICKER, log_directory=logs, log_path="main/0.log"
        )
        _, exited = await run_container(cri, "adopt-exited", ["sh", "-c", "exit 7"])
        await wait_for_state(cri, exited, api_pb2.CONTAINER_EXITED)
        await trio.sleep(0.3)

    old_pid = embedded_runtime.pid
    embedded_runtime.kill()
    log_file = Path(logs, "main/0.log")
    size_while_down = log_file.stat().st_size
    await trio.sleep(0.3)  # the container writes on into its pipe meanwhile
    assert ensure_running(embedded_runtime.root) == embedded_runtime.endpoint
    assert embedded_runtime.pid not in (None, old_pid)

    async with CriClient(embedded_runtime.endpoint, request_timeout=10) as cri:
        status = (await cri.container_status(container_id)).status
        assert status.state == api_pb2.CONTAINER_RUNNING
        assert (await cri.container_status(exited)).status.exit_code == 7
        await trio.sleep(0.3)
        lines = log_file.read_bytes().splitlines()
        assert log_file.stat().st_size > size_while_down, "output goes on to the log after the restart"
        numbers = [int(line.rsplit(b" ", 1)[1]) for line in lines]
        assert numbers == list(range(len(numbers))), "no line lost or repeated across the restart"

        started = time.monotonic()
        await cri.stop_container(container_id, timeout=10)
        assert time.monotonic() - started < 1
        status = (await cri.container_status(container_id)).status
        assert status.state == api_pb2.CONTAINER_EXITED
        assert (status.exit_code, status.reason) == (255, "Unknown")
        assert status.message == "exit code lost: the embedded runtime restarted while the container ran"


async def test_runtime_sigterm_leaves_containers_running(
    embedded_runtime: EmbeddedRuntimeInstance
) -> None:
    async with CriClient(embedded_runtime.endpoint, request_timeout=10) as cri:
        _, container_id = await run_container(cri, "survive", TRAPPING_LOOP)
        pid = _verbose_pid(await cri.container_status(container_id, verbose=True))

    embedded_runtime.stop()
    assert embedded_runtime.pid is None
    assert alive(pid), "stopping the runtime stops no container"
    assert not os.path.exists(embedded_runtime.socket)

    ensure_running(embedded_runtime.root)
    async with CriClient(embedded_runtime.endpoint, request_timeout=10) as cri:
        assert (await cri.container_status(container_id)).status.state == api_pb2.CONTAINER_RUNNING
        os.kill(pid, signal.SIGKILL)  # it dies while the new runtime watches it
        status = await wait_for_state(cri, container_id, api_pb2.CONTAINER_EXITED, within=2)
        assert status.reason == "Unknown"


def test_a_runtime_left_by_a_killed_test_process_is_swept_at_the_next_start():
    import subprocess
    import sys

    from pykubelet.embedded_runtime import launcher
    from tests.support.embedded import sweep_stale_instances

    child = subprocess.Popen(
        [sys.executable, "-c",
         "import time; from tests.support.embedded import EmbeddedRuntimeInstance as E; "
         "i = E(); i.start(); print(i.root, flush=True); time.sleep(60)"],
        stdout=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL,
    )
    try:
        root = child.stdout.readline().strip()
    finally:
        child.kill()
        child.wait()
    assert launcher.runtime_pid(root) is not None  # the runtime outlives the killed test process
    sweep_stale_instances()
    assert launcher.runtime_pid(root) is None and not os.path.exists(root)
