"""Security contexts as the Go kubelet hands them to the CRI, and what it refuses:
container fields over the pod's, seccomp, masked paths, the sandbox's context and sysctls,
privileged containers, the sysctl allowlist, runAsNonRoot against the image's user."""

from __future__ import annotations

import msgspec
import pytest
from cri_api.v1 import api_pb2

from pykubelet.messages.pod import Pod
from pykubelet.pods import security_context as S
from pykubelet.pods.security_context import (
    DEFAULT_MASKED_PATHS,
    DEFAULT_READONLY_PATHS,
    SecurityContextError,
    container_security_context,
    effective_security_context,
    host_thermal_throttle_paths,
    image_user,
    normalize_sysctl_name,
    run_as_non_root_error,
    safe_sysctls,
    sandbox_security_context,
    sandbox_sysctls,
    security_admission,
    security_errors,
)

RUNTIME_DEFAULT = api_pb2.SecurityProfile(profile_type=api_pb2.SecurityProfile.RuntimeDefault)
UNCONFINED = api_pb2.SecurityProfile(profile_type=api_pb2.SecurityProfile.Unconfined)


def pod(spec: dict | None = None, container: dict | None = None, **pod_sc) -> Pod:
    """A pod with one container "c"; pod_sc is the pod's securityContext."""
    spec = {"containers": [{"name": "c", "image": "busybox", **(container or {})}], **(spec or {})}
    if pod_sc:
        spec["securityContext"] = pod_sc
    return msgspec.convert({"metadata": {"name": "web", "namespace": "ns", "uid": "u1"}, "spec": spec}, Pod)


def csc(p: Pod, **kwargs) -> api_pb2.LinuxContainerSecurityContext:
    kwargs.setdefault("thermal_throttle_paths", ())
    return container_security_context(p, p.spec.containers[0], **kwargs)


def container(**sc) -> dict:
    return {"securityContext": sc}


# --- effective security context --------------------------------------------------------


@pytest.mark.parametrize(
    "behaviour, p, expected",
    [
        ("neither set: empty", pod(), {}),
        ("pod only: its user, group and runAsNonRoot", pod(runAsUser=1000, runAsGroup=2000, runAsNonRoot=True,
                                                            fsGroup=3000),
         {"run_as_user": 1000, "run_as_group": 2000, "run_as_non_root": True}),
        ("container only: as written", pod(container=container(runAsUser=5, privileged=True)),
         {"run_as_user": 5, "privileged": True}),
        ("container wins field by field", pod(container=container(runAsUser=5, readOnlyRootFilesystem=True),
                                              runAsUser=1000, runAsGroup=2000),
         {"run_as_user": 5, "run_as_group": 2000, "read_only_root_filesystem": True}),
        ("container runAsNonRoot false overrides the pod's true",
         pod(container=container(runAsNonRoot=False), runAsNonRoot=True), {"run_as_non_root": False}),
    ],
)  # fmt: skip
def test_effective_security_context(behaviour, p, expected):
    got = msgspec.structs.asdict(effective_security_context(p, p.spec.containers[0]))
    assert {name: value for name, value in got.items() if value is not None} == expected


# --- the container's CRI security context ----------------------------------------------


def test_no_security_context_is_unconfined_with_default_masks_and_pod_namespaces():
    got = csc(pod())
    assert got.seccomp == UNCONFINED
    assert list(got.masked_paths) == list(DEFAULT_MASKED_PATHS)
    assert list(got.readonly_paths) == list(DEFAULT_READONLY_PATHS)
    assert not got.privileged and not got.no_new_privs and not got.readonly_rootfs
    assert not got.HasField("run_as_user") and not got.HasField("capabilities")
    assert got.namespace_options == api_pb2.NamespaceOption(
        network=api_pb2.POD, pid=api_pb2.CONTAINER, ipc=api_pb2.POD
    )


def test_masked_paths_are_gos_list():
    assert DEFAULT_MASKED_PATHS == (
        "/proc/asound", "/proc/acpi", "/proc/interrupts", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
        "/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/proc/scsi", "/sys/firmware",
        "/sys/devices/virtual/powercap",
    )  # fmt: skip
    assert DEFAULT_READONLY_PATHS == ("/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger")


@pytest.mark.parametrize(
    "behaviour, p, fields",
    [
        ("user and group become Int64Values", pod(runAsUser=1000, runAsGroup=0),
         {"run_as_user": api_pb2.Int64Value(value=1000), "run_as_group": api_pb2.Int64Value(value=0)}),
        ("privileged and read-only root", pod(container=container(privileged=True, readOnlyRootFilesystem=True)),
         {"privileged": True, "readonly_rootfs": True}),
        ("allowPrivilegeEscalation false sets no_new_privs", pod(container=container(allowPrivilegeEscalation=False)),
         {"no_new_privs": True}),
        ("allowPrivilegeEscalation true leaves it off", pod(container=container(allowPrivilegeEscalation=True)),
         {"no_new_privs": False}),
        ("capabilities pass as written, no CAP_ stripping",
         pod(container=container(capabilities={"add": ["NET_ADMIN", "CAP_SYS_TIME"], "drop": ["ALL"]})),
         {"capabilities": api_pb2.Capability(add_capabilities=["NET_ADMIN", "CAP_SYS_TIME"],
                                             drop_capabilities=["ALL"])}),
        ("fsGroup first, then the pod's supplemental groups", pod(fsGroup=3000, supplementalGroups=[10, 20]),
         {"supplemental_groups": [3000, 10, 20]}),
        ("supplementalGroupsPolicy Strict", pod(supplementalGroupsPolicy="Strict"),
         {"supplemental_groups_policy": api_pb2.Strict}),
        ("procMount Unmasked: no masked or read-only paths", pod(container=container(procMount="Unmasked")),
         {"masked_paths": [], "readonly_paths": []}),
        ("shareProcessNamespace: one PID namespace for the pod", pod({"shareProcessNamespace": True}),
         {"namespace_options": api_pb2.NamespaceOption(network=api_pb2.POD, pid=api_pb2.POD, ipc=api_pb2.POD)}),
        ("host namespaces", pod({"hostNetwork": True, "hostPID": True, "hostIPC": True}),
         {"namespace_options": api_pb2.NamespaceOption(network=api_pb2.NODE, pid=api_pb2.NODE, ipc=api_pb2.NODE)}),
        ("hostPID wins over shareProcessNamespace", pod({"hostPID": True, "shareProcessNamespace": True}),
         {"namespace_options": api_pb2.NamespaceOption(network=api_pb2.POD, pid=api_pb2.NODE, ipc=api_pb2.POD)}),
    ],
)  # fmt: skip
def test_container_security_context(behaviour, p, fields):
    got = csc(p)
    for name, value in fields.items():
        actual = getattr(got, name)
        assert (list(actual) if isinstance(value, list) else actual) == value, name


@pytest.mark.parametrize(
    "behaviour, p, kwargs, expected",
    [
        ("unset: Unconfined", pod(), {}, UNCONFINED),
        ("unset with seccompDefault: RuntimeDefault", pod(), {"seccomp_default": True}, RUNTIME_DEFAULT),
        ("the pod's profile", pod(seccompProfile={"type": "RuntimeDefault"}), {}, RUNTIME_DEFAULT),
        ("the container's wins over the pod's",
         pod(container=container(seccompProfile={"type": "Unconfined"}), seccompProfile={"type": "RuntimeDefault"}),
         {}, UNCONFINED),
        ("Localhost: a path under the profile root",
         pod(container=container(seccompProfile={"type": "Localhost", "localhostProfile": "profiles/audit.json"})),
         {"seccomp_profile_root": "/var/lib/kubelet/seccomp"},
         api_pb2.SecurityProfile(profile_type=api_pb2.SecurityProfile.Localhost,
                                 localhost_ref="/var/lib/kubelet/seccomp/profiles/audit.json")),
        ("an unknown type is Unconfined", pod(seccompProfile={"type": "Bogus"}), {"seccomp_default": True},
         UNCONFINED),
    ],
)  # fmt: skip
def test_seccomp(behaviour, p, kwargs, expected):
    assert csc(p, **kwargs).seccomp == expected


def test_localhost_seccomp_without_a_profile_is_refused():
    with pytest.raises(SecurityContextError, match="localhostProfile must be set if seccompProfile type is Localhost"):
        csc(pod(seccompProfile={"type": "Localhost"}))


def test_unknown_supplemental_groups_policy_is_refused():
    with pytest.raises(SecurityContextError, match="unsupported supplementalGroupsPolicy: Loose"):
        csc(pod(supplementalGroupsPolicy="Loose"))


@pytest.mark.parametrize(
    "behaviour, p, kwargs, user, username",
    [
        ("image uid used when runAsUser is unset", pod(), {"image_uid": 101}, 101, ""),
        ("image user name passed on", pod(), {"image_username": "nginx"}, None, "nginx"),
        ("runAsUser wins over the image", pod(runAsUser=7), {"image_uid": 101, "image_username": "x"}, 7, ""),
    ],
)  # fmt: skip
def test_image_user_fills_an_unset_run_as_user(behaviour, p, kwargs, user, username):
    got = csc(p, **kwargs)
    assert (got.run_as_user.value if got.HasField("run_as_user") else None) == user
    assert got.run_as_username == username


def test_thermal_throttle_directories_of_the_host_are_masked(tmp_path):
    cpu = tmp_path / "devices/system/cpu"
    (cpu / "cpu0/thermal_throttle").mkdir(parents=True)
    (cpu / "cpu2/thermal_throttle").mkdir(parents=True)
    (cpu / "cpu1").mkdir()
    (cpu / "possible").write_text("0-2,5\n")
    paths = host_thermal_throttle_paths(str(tmp_path))
    assert paths == ("/sys/devices/system/cpu/cpu0/thermal_throttle", "/sys/devices/system/cpu/cpu2/thermal_throttle")
    assert list(csc(pod(), thermal_throttle_paths=paths).masked_paths) == [*DEFAULT_MASKED_PATHS, *paths]


# --- the sandbox -----------------------------------------------------------------------


def test_sandbox_runs_runtime_default_seccomp_and_takes_the_pods_identity():
    got = sandbox_security_context(pod(runAsUser=1000, runAsGroup=2000, fsGroup=3000, supplementalGroups=[4]))
    # Set, not left out: an absent profile is the runtime's unconfined.
    assert got.HasField("seccomp") and got.seccomp == RUNTIME_DEFAULT
    assert got.run_as_user.value == 1000 and got.run_as_group.value == 2000
    assert list(got.supplemental_groups) == [3000, 4]
    assert not got.privileged


def test_sandbox_without_pod_security_context_sets_no_user():
    got = sandbox_security_context(pod())
    assert not got.HasField("run_as_user") and not got.HasField("run_as_group")
    assert got.namespace_options.pid == api_pb2.CONTAINER


@pytest.mark.parametrize(
    "behaviour, spec, privileged",
    [
        ("an app container privileged", {"containers": [{"name": "a"}, {"name": "b", "securityContext":
                                                                          {"privileged": True}}]}, True),
        ("an init container privileged", {"initContainers": [{"name": "i", "securityContext": {"privileged": True}}]},
         True),
        ("privileged false", {"containers": [{"name": "a", "securityContext": {"privileged": False}}]}, False),
    ],
)  # fmt: skip
def test_sandbox_is_privileged_when_any_container_is(behaviour, spec, privileged):
    assert sandbox_security_context(pod(spec)).privileged is privileged


def test_sandbox_sysctls_in_dotted_form():
    p = pod(sysctls=[{"name": "net/ipv4/ip_local_port_range", "value": "1024 65000"},
                     {"name": "kernel.shm_rmid_forced", "value": "1"}])  # fmt: skip
    assert sandbox_sysctls(p) == {"net.ipv4.ip_local_port_range": "1024 65000", "kernel.shm_rmid_forced": "1"}


@pytest.mark.parametrize(
    "name, expected",
    [
        ("net.ipv4.conf.eth0.forwarding", "net.ipv4.conf.eth0.forwarding"),
        ("net/ipv4/conf/eth0.100/forwarding", "net.ipv4.conf.eth0/100.forwarding"),
        ("kernel.shmmax", "kernel.shmmax"),
        ("nosep", "nosep"),
    ],
)
def test_normalize_sysctl_name(name, expected):
    assert normalize_sysctl_name(name) == expected


# --- what the kubelet refuses ----------------------------------------------------------

NEW_KERNEL = (6, 1)


def sysctls(*names: str, **spec) -> Pod:
    return pod(spec, sysctls=[{"name": n, "value": "1"} for n in names])


@pytest.mark.parametrize(
    "behaviour, p, kwargs, expected",
    [
        ("no sysctls, no privileged: admitted", pod(), {}, None),
        ("safe sysctls are admitted", sysctls("kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range",
                                              "net.ipv4.tcp_rmem"), {}, None),
        ("an unsafe sysctl is refused", sysctls("net.ipv4.ip_local_port_range", "net.core.somaxconn"), {},
         ("SysctlForbidden", 'forbidden sysctl: "net.core.somaxconn" not allowlisted')),
        ("slashes are read as dots", sysctls("kernel/msgmax"), {},
         ("SysctlForbidden", 'forbidden sysctl: "kernel.msgmax" not allowlisted')),
        ("an allowed unsafe sysctl is admitted", sysctls("net.core.somaxconn"),
         {"allowed_unsafe_sysctls": ["net.core.somaxconn"]}, None),
        ("an allowed unsafe pattern is admitted", sysctls("kernel.msgmax"),
         {"allowed_unsafe_sysctls": ["kernel.msg*"]}, None),
        ("a safe net sysctl on the host network is refused", sysctls("net.ipv4.tcp_syncookies", hostNetwork=True),
         {}, ("SysctlForbidden",
              'forbidden sysctl: "net.ipv4.tcp_syncookies" not allowed with host net enabled')),
        ("an ipc sysctl with host IPC is refused", sysctls("kernel.shm_rmid_forced", hostIPC=True), {},
         ("SysctlForbidden",
          'forbidden sysctl: "kernel.shm_rmid_forced" not allowed with host ipc enabled')),
        ("a kernel too old drops the gated sysctls", sysctls("net.ipv4.tcp_fin_timeout"),
         {"kernel_version": (4, 4)},
         ("SysctlForbidden", 'forbidden sysctl: "net.ipv4.tcp_fin_timeout" not allowlisted')),
        ("privileged is allowed by default", pod(container=container(privileged=True)), {"allow_privileged": True},
         None),
        ("privileged refused when not allowed", pod(container=container(privileged=True)),
         {"allow_privileged": False},
         ("Forbidden", 'pod with UID "u1" specified privileged container, but is disallowed')),
        ("a privileged init container refused when not allowed",
         pod({"initContainers": [{"name": "init", "securityContext": {"privileged": True}}]}),
         {"allow_privileged": False},
         ("Forbidden", 'pod with UID "u1" specified privileged init container, but is disallowed')),
    ],
)  # fmt: skip
def test_security_admission(behaviour, p, kwargs, expected):
    kwargs.setdefault("kernel_version", NEW_KERNEL)
    assert security_admission(p, **kwargs) == expected


def test_security_errors_name_every_field_and_container():
    p = pod(
        {"containers": [{"name": "ok"}, {"name": "root", "securityContext": {"privileged": True}}],
         "initContainers": [{"name": "setup", "securityContext": {"privileged": True}}]},
        sysctls=[{"name": "kernel.shm_rmid_forced", "value": "1"}, {"name": "vm.swappiness", "value": "1"}],
    )  # fmt: skip
    assert security_errors(p, allow_privileged=False, kernel_version=NEW_KERNEL) == [
        'spec.securityContext.sysctls[1]: forbidden sysctl: "vm.swappiness" not allowlisted',
        'spec.containers[1].securityContext.privileged (container "root"): '
        'pod with UID "u1" specified privileged container, but is disallowed',
        'spec.initContainers[0].securityContext.privileged (container "setup"): '
        'pod with UID "u1" specified privileged init container, but is disallowed',
    ]
    assert security_errors(p, kernel_version=NEW_KERNEL) == [
        'spec.securityContext.sysctls[1]: forbidden sysctl: "vm.swappiness" not allowlisted'
    ]


def test_an_unnamespaced_allowed_unsafe_sysctl_is_a_configuration_error():
    with pytest.raises(ValueError, match='the sysctl "vm.swappiness" are not known to be namespaced'):
        security_admission(sysctls("vm.swappiness"), allowed_unsafe_sysctls=["vm.swappiness"],
                           kernel_version=NEW_KERNEL)  # fmt: skip


@pytest.mark.parametrize(
    "kernel, expected_missing",
    [
        (None, {"net.ipv4.ip_local_reserved_ports", "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout",
                "net.ipv4.tcp_keepalive_intvl", "net.ipv4.tcp_keepalive_probes", "net.ipv4.tcp_rmem",
                "net.ipv4.tcp_wmem"}),
        ((4, 5), {"net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem"}),
        ((4, 15), set()),
    ],
)  # fmt: skip
def test_safe_sysctls_follow_the_kernel(kernel, expected_missing):
    assert set(S.SAFE_SYSCTLS) - set(safe_sysctls(kernel)) == expected_missing
    assert len(S.SAFE_SYSCTLS) == 12


# --- runAsNonRoot against the image's user ---------------------------------------------

WHERE = '(pod: "web_ns(u1)", container: c)'


@pytest.mark.parametrize(
    "behaviour, p, uid, username, expected",
    [
        ("runAsNonRoot unset: nothing to check", pod(), 0, "", None),
        ("runAsNonRoot false: nothing to check", pod(runAsNonRoot=False), 0, "", None),
        ("image runs as root", pod(runAsNonRoot=True), 0, "",
         f"container has runAsNonRoot and image will run as root {WHERE}"),
        ("image runs as a numeric non-root user", pod(runAsNonRoot=True), 1000, "", None),
        ("image names a user by name", pod(runAsNonRoot=True), None, "nginx",
         f"container has runAsNonRoot and image has non-numeric user (nginx), cannot verify user is non-root "
         f"{WHERE}"),
        ("runAsUser 0 breaks the policy", pod(container=container(runAsNonRoot=True, runAsUser=0)), 1000, "",
         f"container's runAsUser breaks non-root policy {WHERE}"),
        ("runAsUser non-zero wins over a root image", pod(runAsNonRoot=True, runAsUser=5), 0, "", None),
        ("an image uid out of range", pod(runAsNonRoot=True), 2**31, "",
         f"container has runAsNonRoot and image has an invalid user id (2147483648). (Must be 1-(2147483647)): "
         f"must be between 0 and 2147483647, inclusive {WHERE}"),
    ],
)  # fmt: skip
def test_run_as_non_root_error(behaviour, p, uid, username, expected):
    assert run_as_non_root_error(p, p.spec.containers[0], image_uid=uid, image_username=username) == expected


@pytest.mark.parametrize(
    "image, expected",
    [
        (api_pb2.Image(id="i", uid=api_pb2.Int64Value(value=0)), (0, "")),
        (api_pb2.Image(id="i", uid=api_pb2.Int64Value(value=65534), username="ignored"), (65534, "")),
        (api_pb2.Image(id="i", username="nginx"), (None, "nginx")),
        (api_pb2.Image(id="i"), (0, "")),  # names no user: root
        (None, (0, "")),
    ],
)
def test_image_user(image, expected):
    assert image_user(image) == expected
