"""The CRI configs for a pod's sandbox and containers, built from its spec (pure).

Go kubelet equivalents: kuberuntime_sandbox.go generatePodSandboxConfig and
kuberuntime_container.go generateContainerConfig. The decisions live in labels.py,
security_context.py, hosts_file.py and dns.py; this module only assembles.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from pykubelet.messages.cri_api import api_pb2
from pykubelet.messages.pod import Container, Pod

from .hosts_file import pod_hostname
from .labels import container_annotations, container_labels, sandbox_annotations, sandbox_labels
from .security_context import (
    DEFAULT_SECCOMP_PROFILE_ROOT,
    container_security_context,
    sandbox_security_context,
    sandbox_sysctls,
)


def pod_log_directory(pod_logs_dir: str, pod: Pod) -> str:
    """/var/log/pods/<namespace>_<name>_<uid>, as the Go kubelet names it."""
    meta = pod.metadata
    return os.path.join(pod_logs_dir, f"{meta.namespace}_{meta.name}_{meta.uid}")


def sandbox_config(
    pod: Pod,
    *,
    attempt: int,
    pod_logs_dir: str,
    dns_config: api_pb2.DNSConfig | None = None,
    cluster_domain: str = "",
) -> api_pb2.PodSandboxConfig:
    """dns_config: from dns.pod_dns_config (None: the runtime's default). Raises
    hosts_file.PodHostnameError when the pod's hostname cannot be formed."""
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
    config = api_pb2.PodSandboxConfig(
        metadata=api_pb2.PodSandboxMetadata(
            name=meta.name, uid=meta.uid, namespace=meta.namespace, attempt=attempt
        ),
        # A host-network pod shares the node's UTS namespace: no hostname of its own.
        hostname="" if pod.spec.host_network else pod_hostname(pod, cluster_domain)[0],
        log_directory=pod_log_directory(pod_logs_dir, pod),
        port_mappings=ports,
        labels=sandbox_labels(pod),
        annotations=sandbox_annotations(pod),
        linux=api_pb2.LinuxPodSandboxConfig(
            security_context=sandbox_security_context(pod),
            sysctls=sandbox_sysctls(pod),
        ),
    )
    if dns_config is not None:
        config.dns_config.CopyFrom(dns_config)
    return config


# Go's translateMountPropagation (the API validates the values; Bidirectional needs a
# privileged container).
_PROPAGATION = {
    "None": api_pb2.PROPAGATION_PRIVATE,
    "HostToContainer": api_pb2.PROPAGATION_HOST_TO_CONTAINER,
    "Bidirectional": api_pb2.PROPAGATION_BIDIRECTIONAL,
}


def container_config(
    pod: Pod,
    container: Container,
    *,
    image_ref: str,
    restart_count: int,
    volume_paths: dict[str, str],
    env: Sequence[tuple[str, str]] | None = None,
    command: Sequence[str] | None = None,
    args: Sequence[str] | None = None,
    extra_mounts: Sequence[api_pb2.Mount] = (),
    seccomp_profile_root: str = DEFAULT_SECCOMP_PROFILE_ROOT,
) -> api_pb2.ContainerConfig:
    """`volume_paths`: volume name -> the host path the kubelet prepared for it. `env`,
    `command` and `args`, when given, replace the spec's (already resolved and expanded
    by the caller); `extra_mounts` (e.g. /etc/hosts) follow the volume mounts. Raises
    security_context.SecurityContextError for a securityContext the runtime cannot take."""
    mounts = [
        api_pb2.Mount(
            container_path=mount.mount_path,
            host_path=os.path.join(volume_paths[mount.name], mount.sub_path),
            readonly=mount.read_only,
            propagation=_PROPAGATION[mount.mount_propagation or "None"],
        )
        for mount in container.volume_mounts
        if mount.name in volume_paths
    ]
    return api_pb2.ContainerConfig(
        metadata=api_pb2.ContainerMetadata(name=container.name, attempt=restart_count),
        image=api_pb2.ImageSpec(image=image_ref or container.image, user_specified_image=container.image),
        command=container.command if command is None else command,
        args=container.args if args is None else args,
        working_dir=container.working_dir,
        envs=[
            api_pb2.KeyValue(key=key, value=value)
            for key, value in ([(e.name, e.value) for e in container.env] if env is None else env)
        ],
        mounts=[*mounts, *extra_mounts],
        labels=container_labels(pod, container),
        annotations=container_annotations(pod, container, restart_count),
        log_path=os.path.join(container.name, f"{restart_count}.log"),
        stdin=container.stdin,
        stdin_once=container.stdin_once,
        tty=container.tty,
        linux=api_pb2.LinuxContainerConfig(
            security_context=container_security_context(pod, container, seccomp_profile_root=seccomp_profile_root),
        ),
    )
