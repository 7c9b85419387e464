"""What a pod and its containers need from the node beyond their spec, made ready by the
pod worker before CreateContainer: the objects they read (ConfigMaps, Secrets, Services),
their volumes, their DNS, their /etc/hosts, and each container's environment, command
and mounts (Go: SyncPod's WaitForAttachAndMount, then generateContainerConfig's
makeEnvironmentVariables and makeMounts). The decisions are in pods/; this is the glue.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field

import msgspec
import trio

from pykubelet.actors.volumes.object_cache import EMPTY_SNAPSHOT, ObjectSnapshot, referenced_objects
from pykubelet.messages.cri_api import api_pb2
from pykubelet.messages.pod import Container, Pod, VolumeMount
from pykubelet.pods.dns import DNSWarning, ResolvConfError, pod_dns_config
from pykubelet.pods.downward_api import PodFacts
from pykubelet.pods.env import ContainerConfigError, ServiceEnv, container_env, expand_command, expand_sub_path_expr
from pykubelet.pods.hosts_file import hosts_file_content, hosts_mount, should_mount_hosts_file
from pykubelet.pods.manifest import CONFIG_SOURCE

from .deps import PodWorkerDeps

OBJECTS_TIMEOUT = 10.0  # how long a sync waits for the first read of a referenced object
HOST_HOSTS_FILE = "/etc/hosts"
# Volumes of API data are mounted read-only whatever the mount says (Go: the plugins'
# ReadOnly attribute, mustMountRO): a container cannot change what the kubelet rewrites.
_API_DATA_VOLUMES = frozenset({"configMap", "secret", "downwardAPI", "projected"})


class ObjectsNotReady(Exception):
    """The API server has not answered for an object yet."""


class SandboxConfigError(Exception):
    """The sandbox's config cannot be made (its DNS); FailedCreatePodSandBox."""


@dataclass
class PodSetup:
    """One sync's inputs for its container starts."""

    facts: PodFacts
    objects: ObjectSnapshot = EMPTY_SNAPSHOT
    services: list[ServiceEnv] | None = field(default_factory=list)  # None: not read yet
    volume_paths: dict[str, str] = field(default_factory=dict)


def pod_facts(pod: Pod, deps: PodWorkerDeps, pod_ips: Sequence[str] = ()) -> PodFacts:
    node = deps.node
    return PodFacts(
        node_name=node.name, host_ip=node.host_ip, host_ips=(node.host_ip,), pod_ips=tuple(pod_ips),
        node_allocatable=dict(node.allocatable),
    )


async def read_objects(pod: Pod, deps: PodWorkerDeps) -> tuple[ObjectSnapshot, list[ServiceEnv] | None]:
    """The objects the pod references, as the watches last saw them, and the Services for
    its environment (None while they were never read: its containers wait). Standalone
    mode has neither (static pods may not reference objects)."""
    cache = deps.objects
    if cache is None:
        return EMPTY_SNAPSHOT, []
    keys = referenced_objects(pod)
    cache.use(pod.metadata.uid, keys)
    try:
        snapshot = await cache.snapshot(keys, timeout=OBJECTS_TIMEOUT)
    except Exception as exc:  # ObjectNotReady
        raise ObjectsNotReady(f"waiting for the API server to answer for {exc}") from exc
    # Go builds an API pod's environment only once it has read the Services (or a restarted
    # kubelet would start pods without KUBERNETES_SERVICE_HOST); a static pod does not wait,
    # since the API server may be one of them.
    if pod.metadata.annotations.get(CONFIG_SOURCE) == "api":
        with trio.move_on_after(OBJECTS_TIMEOUT):
            await cache.services_synced.wait()
        if not cache.services_synced.is_set():
            return snapshot, None
    return snapshot, cache.service_env(pod.metadata.namespace)


def sandbox_dns(pod: Pod, deps: PodWorkerDeps) -> tuple[api_pb2.DNSConfig, list[DNSWarning]]:
    """The sandbox's DNS; SandboxConfigError when resolvConf cannot be read or parsed (Go
    fails the sandbox the same way)."""
    node = deps.node
    host_resolv_conf: str | None = None
    if node.resolv_conf:
        try:
            with open(node.resolv_conf) as file:
                host_resolv_conf = file.read()
        except OSError as exc:
            raise SandboxConfigError(f"resolvConf {node.resolv_conf}: {exc.strerror or exc}") from exc
    try:
        return pod_dns_config(
            pod, cluster_dns=node.cluster_dns, cluster_domain=node.cluster_domain,
            host_resolv_conf=host_resolv_conf, node_ips=(node.host_ip,),
        )
    except ResolvConfError as exc:
        raise SandboxConfigError(f"resolvConf {node.resolv_conf}: {exc}") from exc


def write_hosts_file(pod: Pod, deps: PodWorkerDeps, pod_ips: Sequence[str]) -> str:
    """The pod's kubelet-managed /etc/hosts, <root>/pods/<uid>/etc-hosts, rewritten when its
    content changes (the pod's IP is known only once its sandbox runs)."""
    node_hosts = ""
    if pod.spec.host_network:
        try:
            with open(HOST_HOSTS_FILE) as file:
                node_hosts = file.read()
        except OSError:
            pass
    content = hosts_file_content(pod, pod_ips=pod_ips, cluster_domain=deps.node.cluster_domain, node_hosts=node_hosts)
    path = os.path.join(deps.node.root_dir, "pods", pod.metadata.uid, "etc-hosts")
    try:
        with open(path) as file:
            if file.read() == content:
                return path
    except OSError:
        os.makedirs(os.path.dirname(path), exist_ok=True)
    # Written in place, as Go does: running containers have it bind-mounted by inode.
    with open(path, "w") as file:
        file.write(content)
    os.chmod(path, 0o644)
    return path


@dataclass(frozen=True)
class ContainerInputs:
    env: list[tuple[str, str]]
    command: list[str]
    args: list[str]
    container: Container  # with each subPathExpr expanded into subPath
    extra_mounts: list[api_pb2.Mount]


def container_inputs(
    pod: Pod, container: Container, setup: PodSetup, *, hosts_file: str | None, pod_ips: Sequence[str]
) -> ContainerInputs:
    """Environment, expanded command and args, and mounts of one container; raises
    ContainerConfigError (CreateContainerConfigError) naming the missing object or key."""
    if setup.services is None:
        raise ContainerConfigError("services have not yet been read at least once, cannot construct envvars")
    env = container_env(pod, container, facts=setup.facts, objects=setup.objects.for_env(), services=setup.services)
    values = dict(env)
    command, args = expand_command(container, values)
    mounts = []
    read_only_types = {v.name for v in pod.spec.volumes if v.type in _API_DATA_VOLUMES}
    for mount in container.volume_mounts:
        if mount.name in read_only_types and not mount.read_only:
            mount = msgspec.structs.replace(mount, read_only=True)
        if mount.sub_path_expr:
            try:
                mount = msgspec.structs.replace(mount, sub_path=expand_sub_path_expr(mount.sub_path_expr, values))
            except ValueError as exc:
                raise ContainerConfigError(f"volume mount {mount.name}: subPathExpr: {exc}") from exc
        if mount.mount_propagation not in ("", "None", "HostToContainer", "Bidirectional"):
            raise ContainerConfigError(f"volume mount {mount.name}: mountPropagation {mount.mount_propagation!r} "
                                       "is not one of None, HostToContainer, Bidirectional")
        if mount.sub_path:
            mount = msgspec.structs.replace(mount, sub_path=_sub_path(setup.volume_paths.get(mount.name), mount))
        mounts.append(mount)
    extra = []
    if hosts_file is not None and should_mount_hosts_file(container, pod_ips):
        extra.append(hosts_mount(hosts_file))
    return ContainerInputs(
        env=env, command=command, args=args,
        container=msgspec.structs.replace(container, volume_mounts=mounts), extra_mounts=extra,
    )


def _sub_path(volume_path: str | None, mount: VolumeMount) -> str:
    """The subPath inside its volume, resolved, made as a directory when missing (as Go's
    SafeMakeDir, with the volume root's mode and group); one with a `..` step or that
    leads out of the volume (a symlink) is refused."""
    sub_path = mount.sub_path
    if os.path.isabs(sub_path) or ".." in sub_path.split("/"):
        raise ContainerConfigError(f"volume mount {mount.name}: subPath {sub_path!r} must be a relative path without '..'")
    if volume_path is None:
        return sub_path
    try:
        root = os.path.realpath(volume_path)
        target = os.path.realpath(os.path.join(root, sub_path))
        if os.path.commonpath([root, target]) != root:
            raise ContainerConfigError(f"volume mount {mount.name}: subPath {sub_path!r} leads out of its volume")
        if not os.path.lexists(target):
            mode = os.stat(root).st_mode & 0o7777
            os.makedirs(target, exist_ok=True)
            os.chmod(target, mode)
    except OSError as exc:
        raise ContainerConfigError(f"volume mount {mount.name}: subPath {sub_path!r}: {exc.strerror or exc}") from exc
    return os.path.relpath(target, root)
