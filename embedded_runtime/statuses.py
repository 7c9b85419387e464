"""What the CRI calls answer about sandboxes and containers, built from the records (pure).

Field for field what containerd reports, with the embedded runtime's own truths: every
sandbox has the host's network (IP 127.0.0.1), and an image is just its name ("embedded:"
+ the name is its id and ref).
"""

from __future__ import annotations

from dataclasses import dataclass

from cri_api.v1 import api_pb2

from .records import ContainerRecord, SandboxRecord

SANDBOX_IP = "127.0.0.1"  # host network only, whatever network namespace the pod asks for
IMAGE_REF_PREFIX = "embedded:"

# Exit reasons as containerd gives them.
REASON_COMPLETED = "Completed"
REASON_ERROR = "Error"
REASON_START_ERROR = "StartError"
REASON_UNKNOWN = "Unknown"
START_ERROR_EXIT_CODE = 128  # containerd's (and Docker's) exit code for a failed start
UNKNOWN_EXIT_CODE = 255
EXIT_CODE_LOST = "exit code lost: the embedded runtime restarted while the container ran"


def image_ref(image: str) -> str:
    return IMAGE_REF_PREFIX + image


def exit_reason(exit_code: int) -> str:
    return REASON_COMPLETED if exit_code == 0 else REASON_ERROR


@dataclass
class SandboxView:
    record: SandboxRecord
    config: api_pb2.PodSandboxConfig


@dataclass
class ContainerView:
    record: ContainerRecord
    config: api_pb2.ContainerConfig


def pod_sandbox(sandbox: SandboxView) -> api_pb2.PodSandbox:
    record, config = sandbox.record, sandbox.config
    return api_pb2.PodSandbox(
        id=record.id,
        metadata=config.metadata,
        state=api_pb2.PodSandboxState.Value(record.state),
        created_at=record.created_at,
        labels=config.labels,
        annotations=config.annotations,
        runtime_handler=record.runtime_handler,
    )


def pod_sandbox_status(sandbox: SandboxView) -> api_pb2.PodSandboxStatus:
    record, config = sandbox.record, sandbox.config
    namespace_options = config.linux.security_context.namespace_options
    return api_pb2.PodSandboxStatus(
        id=record.id,
        metadata=config.metadata,
        state=api_pb2.PodSandboxState.Value(record.state),
        created_at=record.created_at,
        network=api_pb2.PodSandboxNetworkStatus(ip=SANDBOX_IP),
        linux=api_pb2.LinuxPodSandboxStatus(
            namespaces=api_pb2.Namespace(options=namespace_options)
        ),
        labels=config.labels,
        annotations=config.annotations,
        runtime_handler=record.runtime_handler,
    )


def container(view: ContainerView) -> api_pb2.Container:
    record, config = view.record, view.config
    return api_pb2.Container(
        id=record.id,
        pod_sandbox_id=record.pod_sandbox_id,
        metadata=config.metadata,
        image=api_pb2.ImageSpec(image=config.image.image),
        image_ref=image_ref(config.image.image),
        image_id=image_ref(config.image.image),
        state=api_pb2.ContainerState.Value(record.state),
        created_at=record.created_at,
        labels=config.labels,
        annotations=config.annotations,
    )


def container_status(view: ContainerView) -> api_pb2.ContainerStatus:
    record, config = view.record, view.config
    return api_pb2.ContainerStatus(
        id=record.id,
        metadata=config.metadata,
        state=api_pb2.ContainerState.Value(record.state),
        created_at=record.created_at,
        started_at=record.started_at,
        finished_at=record.finished_at,
        exit_code=record.exit_code,
        image=api_pb2.ImageSpec(image=config.image.image),
        image_ref=image_ref(config.image.image),
        image_id=image_ref(config.image.image),
        reason=record.reason,
        message=record.message,
        labels=config.labels,
        annotations=config.annotations,
        mounts=config.mounts,
        log_path=record.log_path,
    )


def image(name: str, uid: int) -> api_pb2.Image:
    """An image that is only a name: no layers, size 0. `uid` is the user every container
    runs as (the runtime's own), so that the kubelet's runAsNonRoot check tells the truth."""
    return api_pb2.Image(
        id=image_ref(name),
        repo_tags=[name],
        size=0,
        uid=api_pb2.Int64Value(value=uid),
        spec=api_pb2.ImageSpec(image=name),
    )
