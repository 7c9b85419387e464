"""A restarted runtime process takes over what the previous one left: live processes are
adopted, dead ones are EXITED with their exit code lost, a sandbox of an earlier boot is
not ready, and a reused pid is not mistaken for the container."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time

from cri_api.v1 import api_pb2

from pykubelet.embedded_runtime.processes import ProcessIdentity, identify, is_running
from pykubelet.embedded_runtime.records import (
    EXITED,
    RUNNING,
    SANDBOX_NOTREADY,
    SANDBOX_READY,
    ContainerRecord,
    SandboxRecord,
    StateStore,
    config_to_json,
)
from pykubelet.embedded_runtime.runtime import EmbeddedRuntime


def sandbox_record(ident: str, boot_id: str) -> SandboxRecord:
    config = api_pb2.PodSandboxConfig(
        metadata=api_pb2.PodSandboxMetadata(name=ident, namespace="default", uid=ident)
    )
    return SandboxRecord(id=ident, config=config_to_json(config), created_at=1, boot_id=boot_id)


def container_record(ident: str, sandbox_id: str, identity: ProcessIdentity) -> ContainerRecord:
    config = api_pb2.ContainerConfig(
        metadata=api_pb2.ContainerMetadata(name=ident), command=["sleep", "30"]
    )
    return ContainerRecord(
        id=ident, pod_sandbox_id=sandbox_id, config=config_to_json(config), created_at=1,
        state=RUNNING, started_at=2, pid=identity.pid, pid_start_time=identity.start_time,
    )


def test_identity_tells_a_reused_pid_apart() -> None:
    me = identify(os.getpid())
    assert me is not None and is_running(me)
    assert not is_running(ProcessIdentity(me.pid, me.start_time + 1))


def test_recover_adopts_live_processes_and_ends_dead_ones(tmp_path) -> None:
    runtime_dir = tmp_path / "embedded-runtime"
    store = StateStore(runtime_dir / "state")
    boot_id = EmbeddedRuntime(runtime_dir).boot_id
    store.save_sandbox(sandbox_record("this-boot", boot_id))
    store.save_sandbox(sandbox_record("last-boot", "another-boot"))

    live = subprocess.Popen(["sleep", "30"], start_new_session=True)
    dead = subprocess.Popen(["true"], start_new_session=True)
    dead_identity = identify(dead.pid)
    dead.wait()
    try:
        live_identity = identify(live.pid)
        store.save_container(container_record("live", "this-boot", live_identity))
        store.save_container(container_record("dead", "this-boot", dead_identity))
        store.save_container(container_record("orphan", "no-such-sandbox", live_identity))

        async def recover_then_watch_the_exit() -> tuple[str, str]:
            runtime = EmbeddedRuntime(runtime_dir)
            runtime.recover()
            assert runtime.sandboxes["this-boot"].record.state == SANDBOX_READY
            assert runtime.sandboxes["last-boot"].record.state == SANDBOX_NOTREADY
            assert "orphan" not in runtime.containers
            dead_record = runtime.containers["dead"].record
            assert (dead_record.state, dead_record.exit_code, dead_record.reason) == (EXITED, 255, "Unknown")
            assert dead_record.message.startswith("exit code lost")
            adopted = runtime.containers["live"]
            before = adopted.record.state
            os.kill(live.pid, signal.SIGKILL)
            started = time.monotonic()
            await asyncio.wait_for(adopted.process.exited.wait(), 2)
            assert time.monotonic() - started < 1, "an adopted process is polled every 0.2s"
            return before, adopted.record.reason

        assert asyncio.run(recover_then_watch_the_exit()) == (RUNNING, "Unknown")
        assert [r.state for r in StateStore(runtime_dir / "state").load_containers()] == [EXITED, EXITED]
    finally:
        live.kill()
        live.wait()


def test_container_environment_is_minimal_and_the_config_wins() -> None:
    from pykubelet.embedded_runtime.processes import DEFAULT_PATH, container_environment

    env = container_environment([("GREETING", "hi"), ("HOME", "/srv")])
    assert env["PATH"] == DEFAULT_PATH
    assert (env["GREETING"], env["HOME"]) == ("hi", "/srv")
    assert env["HOSTNAME"] == os.uname().nodename
    assert "PYTEST_CURRENT_TEST" not in env, "nothing of the runtime's own env leaks in"
    assert container_environment([("PATH", "/opt/bin")])["PATH"] == "/opt/bin"
