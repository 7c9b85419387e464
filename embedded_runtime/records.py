"""The embedded runtime's persistent state: one JSON file per pod sandbox and per container
under <root>/embedded-runtime/state/, replaced atomically on every change, so that a
restarted runtime process knows every sandbox and container (and the pid of each running
one) as the previous process left them.

The CRI configs are kept as protobuf JSON (field names as in the .proto), so the files read
like `crictl inspect` output and survive additions to the CRI API.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import msgspec
from google.protobuf import json_format
from google.protobuf.message import Message

log = logging.getLogger("pykubelet.embedded_runtime")

# Container states, named as in the CRI ContainerState enum.
CREATED = "CONTAINER_CREATED"
RUNNING = "CONTAINER_RUNNING"
EXITED = "CONTAINER_EXITED"
# Pod sandbox states, named as in the CRI PodSandboxState enum.
SANDBOX_READY = "SANDBOX_READY"
SANDBOX_NOTREADY = "SANDBOX_NOTREADY"


class SandboxRecord(msgspec.Struct, kw_only=True):
    id: str
    config: dict  # api_pb2.PodSandboxConfig as protobuf JSON
    state: str = SANDBOX_READY
    created_at: int  # ns since the epoch
    runtime_handler: str = ""
    boot_id: str = ""  # a sandbox of an earlier boot is not ready any more


class ContainerRecord(msgspec.Struct, kw_only=True):
    id: str
    pod_sandbox_id: str
    config: dict  # api_pb2.ContainerConfig as protobuf JSON
    state: str = CREATED
    created_at: int  # ns since the epoch
    started_at: int = 0
    finished_at: int = 0
    exit_code: int = 0
    reason: str = ""
    message: str = ""
    log_path: str = ""  # absolute: the sandbox's log_directory joined with the config's log_path
    pid: int = 0  # the container's main process (and its process group) while it runs
    pid_start_time: int = 0  # field 22 of /proc/<pid>/stat: tells a reused pid apart


def config_to_json(message: Message) -> dict:
    return json_format.MessageToDict(message, preserving_proto_field_name=True)


def config_from_json(data: dict, message: Message) -> Message:
    return json_format.ParseDict(data, message, ignore_unknown_fields=True)


class StateStore:
    """Reads and writes the record files. A write goes to a temporary file that replaces the
    record in one rename, so a killed runtime leaves either the old or the new record."""

    def __init__(self, state_dir: str | os.PathLike[str]) -> None:
        self.sandbox_dir = Path(state_dir) / "sandboxes"
        self.container_dir = Path(state_dir) / "containers"
        self.sandbox_dir.mkdir(parents=True, exist_ok=True)
        self.container_dir.mkdir(parents=True, exist_ok=True)

    def save_sandbox(self, record: SandboxRecord) -> None:
        _write_atomically(self.sandbox_dir / f"{record.id}.json", msgspec.json.encode(record))

    def save_container(self, record: ContainerRecord) -> None:
        _write_atomically(self.container_dir / f"{record.id}.json", msgspec.json.encode(record))

    def delete_sandbox(self, sandbox_id: str) -> None:
        (self.sandbox_dir / f"{sandbox_id}.json").unlink(missing_ok=True)

    def delete_container(self, container_id: str) -> None:
        (self.container_dir / f"{container_id}.json").unlink(missing_ok=True)

    def load_sandboxes(self) -> list[SandboxRecord]:
        return _load_all(self.sandbox_dir, SandboxRecord)

    def load_containers(self) -> list[ContainerRecord]:
        return _load_all(self.container_dir, ContainerRecord)


def _write_atomically(path: Path, data: bytes) -> None:
    # No fsync: the records must survive the runtime process, not a power cut (after which
    # no container runs any more anyway, and an unreadable record is set aside at load).
    temporary = path.with_name(f".{path.name}.tmp")
    with open(temporary, "wb") as file:
        file.write(data)
    os.replace(temporary, path)


def _load_all(directory: Path, kind: type) -> list:
    records = []
    for path in sorted(directory.glob("*.json")):
        try:
            records.append(msgspec.json.decode(path.read_bytes(), type=kind))
        except (OSError, msgspec.DecodeError, msgspec.ValidationError) as error:
            aside = path.with_name(path.name + ".unreadable")
            log.error("state record %s is unreadable (%s); set aside as %s", path, error, aside)
            os.replace(path, aside)
    return sorted(records, key=lambda record: (record.created_at, record.id))
