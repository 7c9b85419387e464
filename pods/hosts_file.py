"""A pod's hostname and its kubelet-managed /etc/hosts (pure).

The pod workers write hosts_file_content() to <pod dir>/etc-hosts and mount it in every
container with hosts_mount(); the sandbox takes its hostname from pod_hostname().
Go: kubelet_pods.go (GeneratePodHostNameAndDomain, ensureHostsFile, makeMounts) and
pkg/kubelet/util GetNodenameForKernel.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from pykubelet.messages.cri_api import api_pb2
from pykubelet.messages.pod import Container, HostAlias, Pod

ETC_HOSTS_PATH = "/etc/hosts"
MANAGED_HOSTS_HEADER = "# Kubernetes-managed hosts file.\n"
MANAGED_HOSTS_HEADER_HOST_NETWORK = "# Kubernetes-managed hosts file (host network).\n"
HOST_ALIASES_HEADER = "# Entries added by HostAliases.\n"

HOSTNAME_MAX_LENGTH = 63  # the kernel's 64 bytes, less the terminating NUL
FQDN_MAX_LENGTH = 64

_LOCALHOST = (
    "127.0.0.1\tlocalhost\n"
    "::1\tlocalhost ip6-localhost ip6-loopback\n"
    "fe00::0\tip6-localnet\n"
    "fe00::0\tip6-mcastprefix\n"
    "fe00::1\tip6-allnodes\n"
    "fe00::2\tip6-allrouters\n"
)
_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL_FORMAT = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start "
    "and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is "
    "'[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
)
_SUBDOMAIN_FORMAT = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must "
    "start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is "
    "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)


class PodHostnameError(ValueError):
    """The pod's hostname cannot be formed (Go fails the sandbox with this message)."""


def pod_hostname_and_domain(pod: Pod, cluster_domain: str) -> tuple[str, str]:
    """Go's GeneratePodHostNameAndDomain: (short hostname, domain). The hostname is
    spec.hostnameOverride, else spec.hostname, else the pod name, cut to 63 characters;
    the domain is <subdomain>.<namespace>.svc.<cluster domain> when spec.subdomain is set
    (never with hostnameOverride)."""
    spec, name = pod.spec, pod.metadata.name
    if spec.hostname_override is not None:
        if errors := _dns1123_subdomain_errors(spec.hostname_override):
            raise PodHostnameError(
                f'pod HostnameOverride "{spec.hostname_override}" is not a valid DNS subdomain: {";".join(errors)}'
            )
        return _truncate(name, spec.hostname_override), ""
    hostname = name
    if spec.hostname:
        if errors := _dns1123_label_errors(spec.hostname):
            raise PodHostnameError(f'pod Hostname "{spec.hostname}" is not a valid DNS label: {";".join(errors)}')
        hostname = spec.hostname
    hostname = _truncate(name, hostname)
    domain = ""
    if spec.subdomain:
        if errors := _dns1123_label_errors(spec.subdomain):
            raise PodHostnameError(f'pod Subdomain "{spec.subdomain}" is not a valid DNS label: {";".join(errors)}')
        domain = f"{spec.subdomain}.{pod.metadata.namespace}.svc.{cluster_domain}"
    return hostname, domain


def pod_hostname(pod: Pod, cluster_domain: str) -> tuple[str, str]:
    """(the hostname the sandbox gets, the pod's FQDN or "" without a subdomain). With
    setHostnameAsFQDN the hostname is the FQDN, which must fit the kernel's 64 bytes
    (Go: GetNodenameForKernel)."""
    hostname, domain = pod_hostname_and_domain(pod, cluster_domain)
    fqdn = f"{hostname}.{domain}" if domain else ""
    if fqdn and pod.spec.set_hostname_as_fqdn:
        if len(fqdn) > FQDN_MAX_LENGTH:
            raise PodHostnameError(
                f"failed to construct FQDN from pod hostname and cluster domain, FQDN {fqdn} is too long "
                f"({FQDN_MAX_LENGTH} characters is the max, {len(fqdn)} characters requested)"
            )
        return fqdn, fqdn
    return hostname, fqdn


def managed_hosts_file(pod_ips: Sequence[str], hostname: str, domain: str, host_aliases: Sequence[HostAlias]) -> str:
    """Go's managedHostsFileContent for a pod with its own network: localhost entries,
    each pod IP with the FQDN first (when there is a domain) and the short name."""
    names = f"{hostname}.{domain}\t{hostname}" if domain else hostname
    return MANAGED_HOSTS_HEADER + _LOCALHOST + "".join(f"{ip}\t{names}\n" for ip in pod_ips) + _aliases(host_aliases)


def host_network_hosts_file(node_hosts: str, host_aliases: Sequence[HostAlias]) -> str:
    """Go's nodeHostsFileContent: the node's /etc/hosts as it is, then the pod's aliases."""
    return MANAGED_HOSTS_HEADER_HOST_NETWORK + node_hosts + _aliases(host_aliases)


def hosts_file_content(pod: Pod, *, pod_ips: Sequence[str], cluster_domain: str, node_hosts: str) -> str:
    """What Go's ensureHostsFile writes for this pod; node_hosts is the node's /etc/hosts
    (read by the caller, used only for a host-network pod)."""
    if pod.spec.host_network:
        return host_network_hosts_file(node_hosts, pod.spec.host_aliases)
    hostname, domain = pod_hostname_and_domain(pod, cluster_domain)
    return managed_hosts_file(pod_ips, hostname, domain, pod.spec.host_aliases)


def should_mount_hosts_file(container: Container, pod_ips: Sequence[str]) -> bool:
    """Go's makeMounts: only once the pod has an IP (a host-network pod has the node's),
    and never over a volume the container itself mounts at /etc/hosts."""
    return bool(pod_ips) and all(m.mount_path != ETC_HOSTS_PATH for m in container.volume_mounts)


def hosts_mount(host_path: str) -> api_pb2.Mount:
    """The mount Go names k8s-managed-etc-hosts: writable, relabelled for SELinux."""
    return api_pb2.Mount(container_path=ETC_HOSTS_PATH, host_path=host_path, readonly=False, selinux_relabel=True)


def _aliases(host_aliases: Sequence[HostAlias]) -> str:
    if not host_aliases:
        return ""
    # One line per entry, its hostnames tab-separated (older Go wrote a line per hostname).
    lines = "".join(alias.ip + "\t" + "\t".join(alias.hostnames) + "\n" for alias in host_aliases)
    return "\n" + HOST_ALIASES_HEADER + lines


def _truncate(pod_name: str, hostname: str) -> str:
    """Go's truncatePodHostnameIfNeeded: cut to 63, and no trailing '-' or '.'."""
    if len(hostname) <= HOSTNAME_MAX_LENGTH:
        return hostname
    truncated = hostname[:HOSTNAME_MAX_LENGTH].rstrip("-.")
    if not truncated:
        raise PodHostnameError(f'hostname for pod "{pod_name}" was invalid: "{hostname}"')
    return truncated


def _dns1123_label_errors(value: str) -> list[str]:
    errors = []
    if len(value) > HOSTNAME_MAX_LENGTH:
        errors.append(f"must be no more than {HOSTNAME_MAX_LENGTH} characters")
    if not _DNS1123_LABEL.match(value):
        errors.append(_LABEL_FORMAT)
    return errors


def _dns1123_subdomain_errors(value: str) -> list[str]:
    errors = []
    if len(value) > 253:
        errors.append("must be no more than 253 characters")
    if not _DNS1123_SUBDOMAIN.match(value):
        errors.append(_SUBDOMAIN_FORMAT)
    return errors
