"""State records: written atomically, read back by a restarted runtime with their CRI
configs intact; an unreadable record is set aside, not fatal."""

from __future__ import annotations

from cri_api.v1 import api_pb2

from pykubelet.embedded_runtime.records import (
    RUNNING,
    SANDBOX_NOTREADY,
    ContainerRecord,
    SandboxRecord,
    StateStore,
    config_from_json,
    config_to_json,
)


def sandbox_config() -> api_pb2.PodSandboxConfig:
    return api_pb2.PodSandboxConfig(
        metadata=api_pb2.PodSandboxMetadata(name="web", namespace="default", uid="u-1", attempt=2),
        labels={"io.kubernetes.pod.name": "web"},
        annotations={"kubernetes.io/config.seen": "2024-05-01T10:20:30Z"},
        log_directory="/var/log/pods/default_web_u-1",
    )


def container_config() -> api_pb2.ContainerConfig:
    return api_pb2.ContainerConfig(
        metadata=api_pb2.ContainerMetadata(name="main", attempt=1),
        image=api_pb2.ImageSpec(image="busybox:1.36"),
        command=["sh", "-c"],
        args=["echo hi"],
        envs=[api_pb2.KeyValue(key="A", value="1")],
        working_dir="/tmp",
        log_path="main/1.log",
    )


def test_sandbox_and_container_records_round_trip(tmp_path) -> None:
    store = StateStore(tmp_path / "state")
    sandbox = SandboxRecord(
        id="s" * 64, config=config_to_json(sandbox_config()), created_at=1, state=SANDBOX_NOTREADY,
        boot_id="boot-1",
    )
    container = ContainerRecord(
        id="c" * 64, pod_sandbox_id=sandbox.id, config=config_to_json(container_config()),
        created_at=2, state=RUNNING, started_at=3, pid=4242, pid_start_time=987654,
        log_path="/var/log/pods/default_web_u-1/main/1.log",
    )
    store.save_sandbox(sandbox)
    store.save_container(container)

    reread = StateStore(tmp_path / "state")
    assert reread.load_sandboxes() == [sandbox]
    assert reread.load_containers() == [container]
    assert config_from_json(reread.load_sandboxes()[0].config, api_pb2.PodSandboxConfig()) == sandbox_config()
    assert config_from_json(reread.load_containers()[0].config, api_pb2.ContainerConfig()) == container_config()
    assert not list((tmp_path / "state").rglob("*.tmp")), "no temporary file is left behind"


def test_a_changed_record_replaces_the_old_one_and_delete_removes_it(tmp_path) -> None:
    store = StateStore(tmp_path)
    record = ContainerRecord(id="c1", pod_sandbox_id="s1", config={}, created_at=1)
    store.save_container(record)
    record.state, record.exit_code = "CONTAINER_EXITED", 3
    store.save_container(record)
    assert [(r.state, r.exit_code) for r in store.load_containers()] == [("CONTAINER_EXITED", 3)]
    store.delete_container("c1")
    store.delete_container("c1")  # twice is fine
    assert store.load_containers() == []


def test_records_load_in_creation_order(tmp_path) -> None:
    store = StateStore(tmp_path)
    for ident, created in (("zz", 1), ("aa", 3), ("mm", 2)):
        store.save_sandbox(SandboxRecord(id=ident, config={}, created_at=created))
    assert [r.id for r in store.load_sandboxes()] == ["zz", "mm", "aa"]


def test_an_unreadable_record_is_set_aside(tmp_path) -> None:
    store = StateStore(tmp_path)
    store.save_sandbox(SandboxRecord(id="good", config={}, created_at=1))
    (store.sandbox_dir / "bad.json").write_text("{not json")
    assert [r.id for r in store.load_sandboxes()] == ["good"]
    assert (store.sandbox_dir / "bad.json.unreadable").exists()
    assert [r.id for r in store.load_sandboxes()] == ["good"]
