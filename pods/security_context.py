"""Security contexts for the CRI, and the kubelet's own security checks (pure).

A container's securityContext merged over its pod's, turned into the CRI's
LinuxContainerSecurityContext; the sandbox's LinuxSandboxSecurityContext and sysctls; what
the kubelet refuses (privileged containers when not allowed, sysctls off the allowlist) and
the runAsNonRoot check against the image's user at CreateContainer time. runtime_config.py
and the pod workers call these. Go: pkg/securitycontext, kuberuntime/security_context.go,
security_context_others.go, kuberuntime_sandbox.go, helpers.go, pkg/kubelet/sysctl.
"""

from __future__ import annotations

import functools
import json
import os
import platform
import re
from collections.abc import Iterator, Sequence

import msgspec

from pykubelet.messages.cri_api import api_pb2
from pykubelet.messages.pod import Container, Pod, SecurityContext

# Go's kubelet default (cmd/kubelet: <root-dir>/seccomp); pykubelet's root dir is its own.
DEFAULT_SECCOMP_PROFILE_ROOT = "/var/lib/pykubelet/seccomp"

# pkg/securitycontext/util.go, kept in sync with moby by Kubernetes; since v1.33 (and
# back-ported) Go also masks /proc/interrupts and every CPU's thermal_throttle directory
# that exists on the host (see host_thermal_throttle_paths).
DEFAULT_MASKED_PATHS = (
    "/proc/asound", "/proc/acpi", "/proc/interrupts", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
    "/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/proc/scsi", "/sys/firmware",
    "/sys/devices/virtual/powercap",
)  # fmt: skip
DEFAULT_READONLY_PATHS = ("/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger")
UNMASKED_PROC_MOUNT = "Unmasked"

PRIVILEGED_FORBIDDEN_REASON = "Forbidden"  # Go's privilege admit handler, before v1.15
SYSCTL_FORBIDDEN_REASON = "SysctlForbidden"

_MAX_USER_ID = 2**31 - 1

_SECCOMP_TYPES = {
    "RuntimeDefault": api_pb2.SecurityProfile.RuntimeDefault,
    "Unconfined": api_pb2.SecurityProfile.Unconfined,
}


class SecurityContextError(ValueError):
    """A securityContext the runtime cannot be given (Go: CreateContainerConfigError)."""


# --- merging ---------------------------------------------------------------------------


def effective_security_context(pod: Pod, container: Container) -> SecurityContext:
    """Go's DetermineEffectiveSecurityContext: the pod's runAsUser, runAsGroup,
    runAsNonRoot, seLinuxOptions and windowsOptions, overridden by whatever the container
    sets. Seccomp and AppArmor profiles are resolved on their own (seccomp_profile)."""
    pod_sc = pod.spec.security_context
    container_sc = container.security_context
    if pod_sc is None:
        return container_sc or SecurityContext()
    merged = SecurityContext(
        run_as_user=pod_sc.run_as_user,
        run_as_group=pod_sc.run_as_group,
        run_as_non_root=pod_sc.run_as_non_root,
        se_linux_options=pod_sc.se_linux_options,
        windows_options=pod_sc.windows_options,
    )
    if container_sc is None:
        return merged
    overrides = {
        field: value
        for field in ("se_linux_options", "windows_options", "capabilities", "privileged", "run_as_user",
                      "run_as_group", "run_as_non_root", "read_only_root_filesystem", "allow_privilege_escalation",
                      "proc_mount")  # fmt: skip
        if (value := getattr(container_sc, field)) is not None
    }
    return msgspec.structs.replace(merged, **overrides)


def namespace_options(pod: Pod) -> api_pb2.NamespaceOption:
    """Go's NamespacesForPod: shareProcessNamespace gives the pod one PID namespace."""
    spec = pod.spec
    if spec.host_pid:
        pid = api_pb2.NODE
    elif spec.share_process_namespace:
        pid = api_pb2.POD
    else:
        pid = api_pb2.CONTAINER
    return api_pb2.NamespaceOption(
        network=api_pb2.NODE if spec.host_network else api_pb2.POD,
        pid=pid,
        ipc=api_pb2.NODE if spec.host_ipc else api_pb2.POD,
    )


def seccomp_profile(
    pod: Pod, container: Container, *, seccomp_default: bool = False, profile_root: str = DEFAULT_SECCOMP_PROFILE_ROOT
) -> api_pb2.SecurityProfile:
    """Go's getSeccompProfile: the container's profile, else the pod's, else Unconfined
    (RuntimeDefault when the kubelet runs with seccompDefault)."""
    for sc in (container.security_context, pod.spec.security_context):
        if sc is not None and sc.seccomp_profile is not None:
            profile = sc.seccomp_profile
            if profile.type == "Localhost":
                if not profile.localhost_profile:
                    raise SecurityContextError("localhostProfile must be set if seccompProfile type is Localhost.")
                if os.path.isabs(profile.localhost_profile) or ".." in profile.localhost_profile.split("/"):
                    raise SecurityContextError(
                        f"seccompProfile.localhostProfile {profile.localhost_profile!r}: must be a path relative to "
                        f"the kubelet's seccomp directory ({profile_root}), without '..'"
                    )
                return api_pb2.SecurityProfile(
                    profile_type=api_pb2.SecurityProfile.Localhost,
                    localhost_ref=os.path.normpath(os.path.join(profile_root, profile.localhost_profile)),
                )
            # Go maps any type it does not know to Unconfined.
            return api_pb2.SecurityProfile(
                profile_type=_SECCOMP_TYPES.get(profile.type, api_pb2.SecurityProfile.Unconfined)
            )
    default = api_pb2.SecurityProfile.RuntimeDefault if seccomp_default else api_pb2.SecurityProfile.Unconfined
    return api_pb2.SecurityProfile(profile_type=default)


def _supplemental_groups(pod: Pod) -> list[int]:
    sc = pod.spec.security_context
    if sc is None:
        return []
    # fsGroup first, then the pod's groups (Go; GIDs from volume annotations are not kept).
    return ([sc.fs_group] if sc.fs_group is not None else []) + list(sc.supplemental_groups)


def _supplemental_groups_policy(pod: Pod) -> int:
    sc = pod.spec.security_context
    policy = sc.supplemental_groups_policy if sc is not None else None
    if policy is None:
        return api_pb2.Merge
    if policy not in api_pb2.SupplementalGroupsPolicy.keys():
        raise SecurityContextError(f"unsupported supplementalGroupsPolicy: {policy}")
    return api_pb2.SupplementalGroupsPolicy.Value(policy)


# --- what the runtime is given ---------------------------------------------------------


def container_security_context(
    pod: Pod,
    container: Container,
    *,
    image_uid: int | None = None,
    image_username: str = "",
    seccomp_default: bool = False,
    seccomp_profile_root: str = DEFAULT_SECCOMP_PROFILE_ROOT,
    thermal_throttle_paths: Sequence[str] | None = None,
) -> api_pb2.LinuxContainerSecurityContext:
    """Go's determineEffectiveSecurityContext. image_uid / image_username: the image's
    user (image_user), used only when no runAsUser is set. thermal_throttle_paths: the
    per-CPU directories to mask; None reads them from this host."""
    sc = effective_security_context(pod, container)
    out = api_pb2.LinuxContainerSecurityContext(
        privileged=bool(sc.privileged),
        readonly_rootfs=bool(sc.read_only_root_filesystem),
        namespace_options=namespace_options(pod),
        supplemental_groups=_supplemental_groups(pod),
        supplemental_groups_policy=_supplemental_groups_policy(pod),
        # Only an explicit allowPrivilegeEscalation: false sets no_new_privs.
        no_new_privs=sc.allow_privilege_escalation is False,
        seccomp=seccomp_profile(pod, container, seccomp_default=seccomp_default, profile_root=seccomp_profile_root),
    )
    if sc.capabilities is not None:
        # Passed as written ("NET_ADMIN"); the runtime adds the CAP_ prefix.
        out.capabilities.CopyFrom(
            api_pb2.Capability(add_capabilities=sc.capabilities.add, drop_capabilities=sc.capabilities.drop)
        )
    if sc.run_as_user is not None:
        out.run_as_user.value = sc.run_as_user
    else:
        if image_uid is not None:
            out.run_as_user.value = image_uid
        out.run_as_username = image_username
    if sc.run_as_group is not None:
        out.run_as_group.value = sc.run_as_group
    if sc.proc_mount != UNMASKED_PROC_MOUNT:
        if thermal_throttle_paths is None:
            thermal_throttle_paths = host_thermal_throttle_paths()
        out.masked_paths.extend([*DEFAULT_MASKED_PATHS, *thermal_throttle_paths])
        out.readonly_paths.extend(DEFAULT_READONLY_PATHS)
    return out


def has_privileged_container(pod: Pod) -> bool:
    return any(
        c.security_context is not None and c.security_context.privileged
        for c in (*pod.spec.init_containers, *pod.spec.containers)
    )


def sandbox_security_context(pod: Pod) -> api_pb2.LinuxSandboxSecurityContext:
    """Go's generatePodSandboxLinuxConfig: the pause container always runs with the
    runtime's default seccomp profile, privileged when any container of the pod is."""
    out = api_pb2.LinuxSandboxSecurityContext(
        privileged=has_privileged_container(pod),
        seccomp=api_pb2.SecurityProfile(profile_type=api_pb2.SecurityProfile.RuntimeDefault),
        namespace_options=namespace_options(pod),
        supplemental_groups=_supplemental_groups(pod),
        supplemental_groups_policy=_supplemental_groups_policy(pod),
    )
    sc = pod.spec.security_context
    if sc is not None and sc.run_as_user is not None:
        out.run_as_user.value = sc.run_as_user
    if sc is not None and sc.run_as_group is not None:
        out.run_as_group.value = sc.run_as_group
    return out


def sandbox_sysctls(pod: Pod) -> dict[str, str]:
    """The pod's sysctls, names in dotted form (Go: ConvertPodSysctlsVariableToDotsSeparator)."""
    sc = pod.spec.security_context
    return {normalize_sysctl_name(s.name): s.value for s in (sc.sysctls if sc is not None else [])}


# --- the image's user ------------------------------------------------------------------


def image_user(image: api_pb2.Image | None) -> tuple[int | None, str]:
    """Go's getImageUser from an ImageStatus answer: (uid, "") when the image names a
    numeric user, (None, name) for a user name, and root (0, "") when it names neither."""
    if image is not None:
        if image.HasField("uid"):
            return image.uid.value, ""
        if image.username:
            return None, image.username
    return 0, ""


def run_as_non_root_error(
    pod: Pod, container: Container, *, image_uid: int | None, image_username: str = ""
) -> str | None:
    """Go's verifyRunAsNonRoot, checked before CreateContainer (CreateContainerConfigError)."""
    sc = effective_security_context(pod, container)
    if not sc.run_as_non_root:
        return None
    where = f"(pod: {_go_quote(format_pod(pod))}, container: {container.name})"
    if sc.run_as_user is not None:
        return f"container's runAsUser breaks non-root policy {where}" if sc.run_as_user == 0 else None
    if image_uid is None:
        if image_username:
            return (
                f"container has runAsNonRoot and image has non-numeric user ({image_username}), "
                f"cannot verify user is non-root {where}"
            )
        return None
    if image_uid == 0:
        return f"container has runAsNonRoot and image will run as root {where}"
    if not 0 <= image_uid <= _MAX_USER_ID:
        return (
            f"container has runAsNonRoot and image has an invalid user id ({image_uid}). "
            f"(Must be 1-({_MAX_USER_ID})): must be between 0 and {_MAX_USER_ID}, inclusive {where}"
        )
    return None


def format_pod(pod: Pod) -> str:
    """Go's format.Pod: name_namespace(uid)."""
    return f"{pod.metadata.name}_{pod.metadata.namespace}({pod.metadata.uid})"


# --- what the kubelet refuses ----------------------------------------------------------

# pkg/kubelet/sysctl/safe_sysctls.go: name -> the kernel that namespaced it (None: always).
SAFE_SYSCTLS: dict[str, tuple[int, int] | None] = {
    "kernel.shm_rmid_forced": None,
    "net.ipv4.ip_local_port_range": None,
    "net.ipv4.tcp_syncookies": None,
    "net.ipv4.ping_group_range": None,
    "net.ipv4.ip_unprivileged_port_start": None,
    "net.ipv4.ip_local_reserved_ports": (3, 16),
    "net.ipv4.tcp_keepalive_time": (4, 5),
    "net.ipv4.tcp_fin_timeout": (4, 6),
    "net.ipv4.tcp_keepalive_intvl": (4, 5),
    "net.ipv4.tcp_keepalive_probes": (4, 5),
    "net.ipv4.tcp_rmem": (4, 15),
    "net.ipv4.tcp_wmem": (4, 15),
}

# pkg/kubelet/sysctl/namespace.go: which kernel namespace isolates a sysctl.
_NAMESPACE_BY_NAME = {"kernel.sem": "ipc"}
_NAMESPACE_BY_PREFIX = {"kernel.shm": "ipc", "kernel.msg": "ipc", "fs.mqueue.": "ipc", "net.": "net"}


def normalize_sysctl_name(name: str) -> str:
    """sysctl.d(5): a name whose first separator is '/' uses '/' for '.' and back."""
    match = re.search(r"[./]", name)
    if match is None or match.group() == ".":
        return name
    return name.translate(str.maketrans("./", "/."))


def sysctl_namespace(name: str) -> str:
    """The kernel namespace isolating a sysctl: ipc, net, or "" when not known to be one."""
    if name in _NAMESPACE_BY_NAME:
        return _NAMESPACE_BY_NAME[name]
    return next((ns for prefix, ns in _NAMESPACE_BY_PREFIX.items() if name.startswith(prefix)), "")


def safe_sysctls(kernel_version: tuple[int, int] | None) -> list[str]:
    """The safe sysctls this kernel namespaces; with no known version, only the ungated."""
    return [
        name
        for name, needs in SAFE_SYSCTLS.items()
        if needs is None or (kernel_version is not None and kernel_version >= needs)
    ]


def security_admission(
    pod: Pod,
    *,
    allow_privileged: bool = True,
    allowed_unsafe_sysctls: Sequence[str] = (),
    kernel_version: tuple[int, int] | None | str = "host",
) -> tuple[str, str] | None:
    """The first refusal as (reason, message) in Go's words, or None to admit: the sysctl
    allowlist admit handler ("SysctlForbidden"), then privileged containers (Go's
    --allow-privileged, gone since v1.15 and true by default since v1.13, hence
    allow_privileged=True)."""
    for reason, _field, message in _findings(pod, allow_privileged, allowed_unsafe_sysctls, kernel_version):
        return reason, message
    return None


def security_errors(
    pod: Pod,
    *,
    allow_privileged: bool = True,
    allowed_unsafe_sysctls: Sequence[str] = (),
    kernel_version: tuple[int, int] | None | str = "host",
) -> list[str]:
    """Every refusal, each naming the field (and container): for logs and events.
    kernel_version "host" reads this machine's (os.uname)."""
    return [
        f"{field}: {message}"
        for _reason, field, message in _findings(pod, allow_privileged, allowed_unsafe_sysctls, kernel_version)
    ]


def _findings(
    pod: Pod, allow_privileged: bool, allowed_unsafe: Sequence[str], kernel_version
) -> Iterator[tuple[str, str, str]]:
    sc = pod.spec.security_context
    if sc is not None and sc.sysctls:
        if kernel_version == "host":
            kernel_version = host_kernel_version()
        allowlist = _sysctl_allowlist(safe_sysctls(kernel_version), allowed_unsafe)
        for index, sysctl in enumerate(sc.sysctls):
            error = _sysctl_error(allowlist, sysctl.name, pod.spec.host_network, pod.spec.host_ipc)
            if error:
                yield SYSCTL_FORBIDDEN_REASON, f"spec.securityContext.sysctls[{index}]", f"forbidden sysctl: {error}"
    if allow_privileged:
        return
    uid = _go_quote(pod.metadata.uid)
    for kind, field, containers in (
        ("container", "containers", pod.spec.containers),
        ("init container", "initContainers", pod.spec.init_containers),
    ):
        for index, container in enumerate(containers):
            if container.security_context is not None and container.security_context.privileged:
                yield (
                    PRIVILEGED_FORBIDDEN_REASON,
                    f"spec.{field}[{index}].securityContext.privileged (container {_go_quote(container.name)})",
                    f"pod with UID {uid} specified privileged {kind}, but is disallowed",
                )


def _sysctl_allowlist(safe: Sequence[str], unsafe: Sequence[str]) -> tuple[dict[str, str], dict[str, str]]:
    """Go's NewAllowlist: exact names and prefixes ("net.core.*"), each with its namespace."""
    names: dict[str, str] = {}
    prefixes: dict[str, str] = {}
    for pattern in (*safe, *unsafe):
        pattern = normalize_sysctl_name(pattern)
        if pattern.endswith("*"):
            namespace = sysctl_namespace(pattern[:-1])
            if not namespace:
                raise ValueError(f"the sysctls {_go_quote(pattern)} are not known to be namespaced")
            prefixes[pattern[:-1]] = namespace
        else:
            namespace = sysctl_namespace(pattern)
            if not namespace:
                raise ValueError(f"the sysctl {_go_quote(pattern)} are not known to be namespaced")
            names[pattern] = namespace
    return names, prefixes


def _sysctl_error(allowlist, name: str, host_net: bool, host_ipc: bool) -> str:
    names, prefixes = allowlist
    name = normalize_sysctl_name(name)
    namespace = names.get(name)
    if namespace is None:
        namespace = next((ns for prefix, ns in prefixes.items() if name.startswith(prefix)), None)
    if namespace is None:
        return f"{_go_quote(name)} not allowlisted"
    if (namespace == "ipc" and host_ipc) or (namespace == "net" and host_net):
        return f"{_go_quote(name)} not allowed with host {namespace} enabled"
    return ""


# --- the host (read once, as Go does) --------------------------------------------------


@functools.cache
def host_kernel_version() -> tuple[int, int] | None:
    match = re.match(r"(\d+)\.(\d+)", platform.release())
    return (int(match[1]), int(match[2])) if match else None


def host_thermal_throttle_paths(sys_root: str = "/sys") -> tuple[str, ...]:
    """/sys/devices/system/cpu/cpu<N>/thermal_throttle for each possible CPU that has one."""
    if sys_root == "/sys":
        return _host_thermal_throttle_paths()
    return _thermal_throttle_paths(sys_root)


@functools.cache
def _host_thermal_throttle_paths() -> tuple[str, ...]:
    return _thermal_throttle_paths("/sys")


def _thermal_throttle_paths(sys_root: str) -> tuple[str, ...]:
    cpus = _possible_cpus(os.path.join(sys_root, "devices/system/cpu/possible"))
    paths = []
    for cpu in cpus:
        path = f"/sys/devices/system/cpu/cpu{cpu}/thermal_throttle"
        if os.path.exists(os.path.join(sys_root, path.removeprefix("/sys/"))):
            paths.append(path)
    return tuple(paths)


def _possible_cpus(path: str) -> list[int]:
    try:
        with open(path) as file:
            text = file.read().strip()
        cpus: list[int] = []
        for part in text.split(","):
            start, _, end = part.partition("-")
            cpus.extend(range(int(start), int(end or start) + 1))
        return cpus
    except (OSError, ValueError):
        return list(range(os.cpu_count() or 1))


def _go_quote(text: str) -> str:
    """Go's %q for the printable ASCII these messages carry."""
    return json.dumps(text)
