"""The CRI configs for a pod's sandbox and containers, built from its spec (pure).

Go kubelet equivalents: kuberuntime_sandbox.go generatePodSandboxConfig and
kuberuntime_container.go generateContainerConfig.
"""

from __future__ import annotations

import os

from cri_api.v1 import api_pb2

from pykubelet.messages.pod import Container, Pod

from .labels import container_annotations, container_labels, sandbox_annotations, sandbox_labels


def pod_log_directory(pod_logs_dir: str, pod: Pod) -> str:
    """/var/log/pods/<namespace>_<name>_<uid>, as the Go kubelet names it."""
    meta = pod.metadata
    return os.path.join(pod_logs_dir, f"{meta.namespace}_{meta.name}_{meta.uid}")


def _namespaces(pod: Pod) -> api_pb2.NamespaceOption:
    spec = pod.spec
    return api_pb2.NamespaceOption(
        network=api_pb2.NODE if spec.host_network else api_pb2.POD,
        pid=api_pb2.NODE if spec.host_pid else api_pb2.CONTAINER,
        ipc=api_pb2.NODE if spec.host_ipc else api_pb2.POD,
    )


def sandbox_config(pod: Pod, *, attempt: int, pod_logs_dir: str) -> api_pb2.PodSandboxConfig:
    meta = pod.metadata
    ports = [
        api_pb2.PortMapping(
            protocol={"TCP": api_pb2.TCP, "UDP": api_pb2.UDP, "SCTP": api_pb2.SCTP}.get(port.protocol, api_pb2.TCP),
            container_port=port.container_port,
            host_port=port.host_port,
            host_ip=port.host_ip,
        )
        for container in pod.spec.containers
        for port in container.ports
        if port.host_port
    ]
    return api_pb2.PodSandboxConfig(
        metadata=api_pb2.PodSandboxMetadata(
            name=meta.name, uid=meta.uid, namespace=meta.namespace, attempt=attempt
        ),
        # A host-network pod shares the node's UTS namespace: no hostname of its own.
        hostname="" if pod.spec.host_network else (pod.spec.hostname or meta.name)[:63],
        log_directory=pod_log_directory(pod_logs_dir, pod),
        port_mappings=ports,
        labels=sandbox_labels(pod),
        annotations=sandbox_annotations(pod),
        linux=api_pb2.LinuxPodSandboxConfig(
            security_context=api_pb2.LinuxSandboxSecurityContext(namespace_options=_namespaces(pod)),
        ),
    )


def container_config(
    pod: Pod,
    container: Container,
    *,
    image_ref: str,
    restart_count: int,
    volume_paths: dict[str, str],
) -> api_pb2.ContainerConfig:
    """`volume_paths`: volume name -> the host path the kubelet prepared for it."""
    mounts = [
        api_pb2.Mount(
            container_path=mount.mount_path,
            host_path=os.path.join(volume_paths[mount.name], mount.sub_path),
            readonly=mount.read_only,
        )
        for mount in container.volume_mounts
        if mount.name in volume_paths
    ]
    return api_pb2.ContainerConfig(
        metadata=api_pb2.ContainerMetadata(name=container.name, attempt=restart_count),
        image=api_pb2.ImageSpec(image=image_ref or container.image, user_specified_image=container.image),
        command=container.command,
        args=container.args,
        working_dir=container.working_dir,
        envs=[api_pb2.KeyValue(key=env.name, value=env.value) for env in container.env],
        mounts=mounts,
        labels=container_labels(pod, container),
        annotations=container_annotations(pod, container, restart_count),
        log_path=os.path.join(container.name, f"{restart_count}.log"),
        stdin=container.stdin,
        tty=container.tty,
        linux=api_pb2.LinuxContainerConfig(
            security_context=api_pb2.LinuxContainerSecurityContext(namespace_options=_namespaces(pod)),
        ),
    )
