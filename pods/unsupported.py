"""The pod fields pykubelet does not implement, named by their API paths: the ones that
would change what runs (admission refuses the pod) and the ones the Go kubelet ignores too
(the sync loop warns once). Pure; pods/admission.py and the sync loop call it.

Volume sources pykubelet cannot mount are not here: the volume manager reports them as
FailedMount events naming the volume.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, NamedTuple

from pykubelet.messages.pod import Container, EnvVar, Pod, SecurityContext, Volume

# What the sync loop says about an ignored field, by the field's last name.
_SCHEDULERS = "is the scheduler's; the kubelet ignores it"
_WHY_IGNORED = {
    "preferredDuringSchedulingIgnoredDuringExecution": _SCHEDULERS,
    "podAffinity": _SCHEDULERS,
    "podAntiAffinity": _SCHEDULERS,
    "topologySpreadConstraints": _SCHEDULERS,
    "schedulingGates": _SCHEDULERS,
    "schedulingGroup": _SCHEDULERS,
    "preemptionPolicy": _SCHEDULERS,
    "windowsOptions": "is for Windows nodes; the kubelet on Linux ignores it",
    "resizePolicy": (
        "RestartContainer is not honoured: pykubelet resizes every container in place "
        "(UpdateContainerResources), as NotRequired does"
    ),
    "ephemeralContainers": (
        "was added to the running pod (kubectl debug?); pykubelet does not run ephemeral containers"
    ),
    "imagePullSecrets": (
        "is not used: pykubelet pulls without registry credentials, so an image that needs them fails "
        "with ErrImagePull"
    ),
    "automountServiceAccountToken": "is the API server's (its ServiceAccount admission); the kubelet ignores it",
    "fsGroupChangePolicy": (
        "is not needed: pykubelet sets the group of each volume's root and of the files it writes, "
        "and never changes ownership recursively"
    ),
}


class UnsupportedFields(NamedTuple):
    """API field paths (JSON names, with indexes) that a pod sets and pykubelet does not
    implement. refused: the pod must not start here. ignored: warned about, then run."""

    refused: tuple[str, ...] = ()
    ignored: tuple[str, ...] = ()


def why_ignored(path: str) -> str:
    """The warning's words for an ignored field: "is the scheduler's; the kubelet ignores it"."""
    return _WHY_IGNORED[path.rsplit(".", 1)[-1].split("[", 1)[0]]


def unsupported_fields(pod: Pod) -> UnsupportedFields:
    """The fields `pod` sets that pykubelet does not implement: pod fields first, then the
    init containers', the containers', the volumes'; the scheduler's last."""
    refused: list[str] = []
    ignored: list[str] = []
    spec = pod.spec

    # Pod fields that change what runs on the node, each a feature pykubelet lacks:
    # a runtime handler (and the overhead its RuntimeClass adds to the pod's cgroup),
    # pod-level resources (the pod cgroup's limits), DRA claims, user namespaces.
    if spec.runtime_class_name:
        refused.append("spec.runtimeClassName")
    if spec.overhead:
        refused.append("spec.overhead")
    if _set(spec.resources):
        refused.append("spec.resources")
    if _set(spec.resource_claims):
        refused.append("spec.resourceClaims")
    if spec.host_users is False:  # true or unset: the host's user namespace, as pykubelet runs
        refused.append("spec.hostUsers")
    # pykubelet pulls without registry credentials. Unlike the scheduler's fields the Go
    # kubelet reads these, and an image that needs them fails to pull much later with a
    # registry's 401 that does not name the cause; refusing names it at once. (A service
    # account's imagePullSecrets are copied into every pod that uses it.)
    if spec.image_pull_secrets:
        ignored.append("spec.imagePullSecrets")
    if spec.automount_service_account_token is not None:
        ignored.append("spec.automountServiceAccountToken")
    # Ephemeral containers (kubectl debug) cannot be set at creation; the API adds them to
    # a running pod. A pod that comes with them before pykubelet ever started it (a static
    # pod) is refused; one that already ran here keeps running and is warned about, so a
    # kubelet restart does not kill a pod someone debugged.
    if _set(spec.ephemeral_containers):
        (refused if pod.status.start_time is None else ignored).append("spec.ephemeralContainers")

    # spec.os is not here: a pod for another OS is rejected by admission with Go's
    # PodOSNotSupported, as the Go kubelet does.

    # SELinux: pykubelet passes no label to the runtime, so on a host that enforces SELinux
    # the processes and volumes would get other labels than the pod asks for.
    if spec.security_context is not None:
        if _set(spec.security_context.se_linux_options):
            refused.append("spec.securityContext.seLinuxOptions")
        if _set(spec.security_context.se_linux_change_policy):
            refused.append("spec.securityContext.seLinuxChangePolicy")
        # Strict needs a runtime that reports it can (containerd 2.0+); Go refuses the pod
        # with SupplementalGroupsPolicyNotSupported where it cannot.
        if spec.security_context.supplemental_groups_policy == "Strict":
            refused.append("spec.securityContext.supplementalGroupsPolicy")
        if spec.security_context.fs_group_change_policy:
            ignored.append("spec.securityContext.fsGroupChangePolicy")
        profile = spec.security_context.app_armor_profile
        if profile is not None and profile.type != "Unconfined":
            refused.append("spec.securityContext.appArmorProfile")
        # Windows-only, as the container's below: Go reads them only on a Windows node.
        if _set(spec.security_context.windows_options):
            ignored.append("spec.securityContext.windowsOptions")

    for kind, containers in (("initContainers", spec.init_containers), ("containers", spec.containers)):
        for i, container in enumerate(containers):
            path = f"spec.{kind}[{i}]"
            init = kind == "initContainers"
            refused += [f"{path}.{field}" for field in _refused_container_fields(container, pod, init=init)]
            if container.security_context is not None and _set(container.security_context.windows_options):
                ignored.append(f"{path}.securityContext.windowsOptions")
            # Read by an in-place resize: NotRequired is what pykubelet does; RestartContainer
            # (restart the container to resize it) is not done.
            if any(isinstance(p, dict) and p.get("restartPolicy") == "RestartContainer"
                   for p in container.resize_policy or ()):
                ignored.append(f"{path}.resizePolicy")

    for i, volume in enumerate(spec.volumes):
        refused += [f"spec.volumes[{i}].{field}" for field in _refused_volume_fields(volume)]

    # The scheduler's: placement is done by the time the pod is bound here, and the Go
    # kubelet admits on nodeSelector and required node affinity only.
    affinity = spec.affinity
    if affinity is not None:
        if affinity.node_affinity is not None and _set(
            affinity.node_affinity.preferred_during_scheduling_ignored_during_execution
        ):
            ignored.append("spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution")
        if _set(affinity.pod_affinity):
            ignored.append("spec.affinity.podAffinity")
        if _set(affinity.pod_anti_affinity):
            ignored.append("spec.affinity.podAntiAffinity")
    if _set(spec.topology_spread_constraints):
        ignored.append("spec.topologySpreadConstraints")
    if _set(spec.scheduling_gates):
        ignored.append("spec.schedulingGates")
    if _set(spec.scheduling_group):
        ignored.append("spec.schedulingGroup")
    # The priority admission plugin writes PreemptLowerPriority into every pod: that is the
    # API's default, not something the pod asks for.
    if spec.preemption_policy not in (None, "", "PreemptLowerPriority"):
        ignored.append("spec.preemptionPolicy")

    return UnsupportedFields(tuple(refused), tuple(ignored))


def _refused_container_fields(container: Container, pod: Pod, *, init: bool) -> Iterator[str]:
    # Restart rules (ContainerRestartRules) decide per exit code whether a container
    # restarts; pykubelet follows the pod's restartPolicy. A container-level restartPolicy is
    # implemented only as "Always" on an init container (a sidecar), and is harmless on a
    # regular container where it repeats the pod's.
    if _set(container.restart_policy_rules):
        yield "restartPolicyRules"
    if container.restart_policy is not None:
        if init and container.restart_policy != "Always":
            yield "restartPolicy"
        elif not init and container.restart_policy != (pod.spec.restart_policy or "Always"):
            yield "restartPolicy"
    # Raw block devices and DRA claims: devices the container would not get.
    if _set(container.volume_devices):
        yield "volumeDevices"
    if container.resources is not None and _set(container.resources.claims):
        yield "resources.claims"
    for k, env in enumerate(container.env):
        yield from (f"env[{k}].{field}" for field in _refused_env_fields(env))
    # A stop signal other than the image's (ContainerStopSignals): CRI 1.6 cannot take it,
    # and the container would get SIGTERM instead.
    if container.lifecycle is not None and container.lifecycle.stop_signal:
        yield "lifecycle.stopSignal"
    # Recursive read-only mounts need a runtime that says it can (CRI RuntimeHandler
    # features); IfPossible falls back to a plain read-only mount, as in Go.
    for k, mount in enumerate(container.volume_mounts):
        if mount.recursive_read_only == "Enabled":
            yield f"volumeMounts[{k}].recursiveReadOnly"
    if container.security_context is not None:
        yield from (f"securityContext.{field}" for field in _refused_security_fields(container.security_context))


def _refused_env_fields(env: EnvVar) -> Iterator[str]:
    # A variable read from a file in an emptyDir (EnvFiles): the container would start
    # without it.
    if env.value_from is not None and _set(env.value_from.file_key_ref):
        yield "valueFrom.fileKeyRef"


def _refused_security_fields(context: SecurityContext) -> Iterator[str]:
    if _set(context.se_linux_options):
        yield "seLinuxOptions"
    # AppArmor: pykubelet passes no profile to the runtime, so a pod asking for one would run
    # unconfined. Unconfined is what it gets, so that one is fine.
    if context.app_armor_profile is not None and context.app_armor_profile.type != "Unconfined":
        yield "appArmorProfile"


def _refused_volume_fields(volume: Volume) -> Iterator[str]:
    # Projected sources pykubelet cannot write: the files would be missing.
    if volume.projected is None:
        return
    for j, source in enumerate(volume.projected.sources):
        if _set(source.cluster_trust_bundle):
            yield f"projected.sources[{j}].clusterTrustBundle"
        if _set(source.pod_certificate):
            yield f"projected.sources[{j}].podCertificate"


def _set(value: Any) -> bool:
    """Whether a decoded field is set: JSON null, [] and {} are what the API omits."""
    return value is not None and value != [] and value != {}
