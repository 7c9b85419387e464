"""The CRI sandbox and container configs: hostname, DNS, sysctls and security contexts
wired in, and the caller's resolved env, command, args and extra mounts."""

from __future__ import annotations

import msgspec
from cri_api.v1 import api_pb2

from pykubelet.messages.pod import Pod
from pykubelet.pods.runtime_config import container_config, sandbox_config
from pykubelet.pods.security_context import DEFAULT_MASKED_PATHS


def pod(**spec) -> Pod:
    return msgspec.convert(
        {"metadata": {"name": "web", "namespace": "ns", "uid": "u1"},
         "spec": {"containers": [{"name": "c", "image": "busybox", "command": ["sh"], "args": ["-c", "$(X)"],
                                  "env": [{"name": "A", "value": "1"}],
                                  "volumeMounts": [{"name": "data", "mountPath": "/data"}]}], **spec}},
        Pod)  # fmt: skip


def sandbox(p: Pod, **kwargs) -> api_pb2.PodSandboxConfig:
    return sandbox_config(p, attempt=0, pod_logs_dir="/var/log/pods", **kwargs)


def container(p: Pod, **kwargs) -> api_pb2.ContainerConfig:
    return container_config(p, p.spec.containers[0], image_ref="sha256:1", restart_count=0,
                            volume_paths={"data": "/v/data"}, **kwargs)  # fmt: skip


def test_sandbox_hostname_is_the_pods():
    assert sandbox(pod()).hostname == "web"
    assert sandbox(pod(hostname="h", subdomain="s", setHostnameAsFQDN=True), cluster_domain="cl").hostname == (
        "h.s.ns.svc.cl"
    )


def test_host_network_sandbox_has_no_hostname():
    assert sandbox(pod(hostNetwork=True, hostname="h")).hostname == ""


def test_sandbox_dns_config_only_when_given():
    assert not sandbox(pod()).HasField("dns_config")
    given = api_pb2.DNSConfig(servers=["10.96.0.10"], searches=["ns.svc.cl"], options=["ndots:5"])
    assert sandbox(pod(), dns_config=given).dns_config == given


def test_sandbox_sysctls_and_security_context():
    p = pod(securityContext={"runAsUser": 1000, "sysctls": [{"name": "net/ipv4/tcp_syncookies", "value": "1"}]},
            shareProcessNamespace=True)  # fmt: skip
    linux = sandbox(p).linux
    assert dict(linux.sysctls) == {"net.ipv4.tcp_syncookies": "1"}
    assert linux.security_context.run_as_user.value == 1000
    assert linux.security_context.seccomp.profile_type == api_pb2.SecurityProfile.RuntimeDefault
    assert linux.security_context.namespace_options.pid == api_pb2.POD


def test_container_defaults_keep_the_spec():
    config = container(pod())
    assert list(config.command) == ["sh"] and list(config.args) == ["-c", "$(X)"]
    assert [(e.key, e.value) for e in config.envs] == [("A", "1")]
    assert [(m.container_path, m.host_path) for m in config.mounts] == [("/data", "/v/data/")]


def test_container_takes_resolved_env_command_args_and_extra_mounts():
    hosts = api_pb2.Mount(container_path="/etc/hosts", host_path="/p/etc-hosts")
    config = container(pod(), env=[("A", "1"), ("X", "resolved")], command=["/bin/sh"], args=["-c", "resolved"],
                       extra_mounts=[hosts])  # fmt: skip
    assert list(config.command) == ["/bin/sh"] and list(config.args) == ["-c", "resolved"]
    assert [(e.key, e.value) for e in config.envs] == [("A", "1"), ("X", "resolved")]
    assert [m.container_path for m in config.mounts] == ["/data", "/etc/hosts"]


def test_empty_overrides_replace_the_spec():
    config = container(pod(), env=[], command=[], args=[])
    assert list(config.command) == [] and list(config.args) == [] and list(config.envs) == []


def test_container_security_context_is_wired():
    p = pod(securityContext={"runAsUser": 1000})
    sc = container(p).linux.security_context
    assert sc.run_as_user.value == 1000
    assert list(sc.masked_paths)[: len(DEFAULT_MASKED_PATHS)] == list(DEFAULT_MASKED_PATHS)
    assert sc.seccomp.profile_type == api_pb2.SecurityProfile.Unconfined
    assert sc.namespace_options.network == api_pb2.POD
