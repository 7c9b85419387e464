"""A pod's hostname and its managed /etc/hosts, byte for byte as the Go kubelet writes them."""

from __future__ import annotations

import msgspec
import pytest
from cri_api.v1 import api_pb2

from pykubelet.messages.pod import Container, HostAlias, Pod, VolumeMount
from pykubelet.pods.hosts_file import (
    PodHostnameError,
    host_network_hosts_file,
    hosts_file_content,
    hosts_mount,
    managed_hosts_file,
    pod_hostname,
    pod_hostname_and_domain,
    should_mount_hosts_file,
)

LOCALHOST = (
    "127.0.0.1\tlocalhost\n"
    "::1\tlocalhost ip6-localhost ip6-loopback\n"
    "fe00::0\tip6-localnet\n"
    "fe00::0\tip6-mcastprefix\n"
    "fe00::1\tip6-allnodes\n"
    "fe00::2\tip6-allrouters\n"
)
ALIASES = [HostAlias(ip="10.1.2.3", hostnames=["foo.local", "bar.local"]), HostAlias(ip="10.1.2.4", hostnames=["baz"])]


def pod(name: str = "web", **spec) -> Pod:
    return msgspec.convert(
        {"metadata": {"name": name, "namespace": "ns", "uid": "u1"}, "spec": {"containers": [{"name": "c"}], **spec}},
        Pod,
    )


# --- hostname --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "behaviour, p, expected",
    [
        ("the pod name", pod(), ("web", "")),
        ("spec.hostname wins", pod(hostname="db-0"), ("db-0", "")),
        ("a subdomain gives the FQDN", pod(hostname="db-0", subdomain="db"), ("db-0", "db-0.db.ns.svc.cluster.local")),
        ("setHostnameAsFQDN: the hostname is the FQDN", pod(hostname="db-0", subdomain="db", setHostnameAsFQDN=True),
         ("db-0.db.ns.svc.cluster.local", "db-0.db.ns.svc.cluster.local")),
        ("setHostnameAsFQDN without a subdomain changes nothing", pod(setHostnameAsFQDN=True), ("web", "")),
        ("a long pod name is cut to 63", pod(name="a" * 70), ("a" * 63, "")),
        ("a cut that ends in - or . loses it", pod(name="a" * 61 + "-.b-c"), ("a" * 61, "")),
        ("hostnameOverride wins and has no domain", pod(hostname="db-0", subdomain="db",
                                                        hostnameOverride="db-0.db.example.com"),
         ("db-0.db.example.com", "")),
    ],
)  # fmt: skip
def test_pod_hostname(behaviour, p, expected):
    assert pod_hostname(p, "cluster.local") == expected


def test_hostname_and_domain_are_apart():
    assert pod_hostname_and_domain(pod(hostname="h", subdomain="s"), "example.org") == ("h", "s.ns.svc.example.org")


@pytest.mark.parametrize(
    "behaviour, p, message",
    [
        ("an FQDN over 64 characters", pod(hostname="h" * 30, subdomain="s" * 20, setHostnameAsFQDN=True),
         "failed to construct FQDN from pod hostname and cluster domain, FQDN " + "h" * 30 + "." + "s" * 20
         + ".ns.svc.cluster.local is too long (64 characters is the max, 72 characters requested)"),
        ("a hostname that is not a DNS label", pod(hostname="Web_1"),
         'pod Hostname "Web_1" is not a valid DNS label: '),
        ("a subdomain that is not a DNS label", pod(subdomain="a.b"), 'pod Subdomain "a.b" is not a valid DNS label: '),
        ("an override that is not a DNS subdomain", pod(hostnameOverride="-x"),
         'pod HostnameOverride "-x" is not a valid DNS subdomain: '),
    ],
)  # fmt: skip
def test_pod_hostname_errors(behaviour, p, message):
    with pytest.raises(PodHostnameError) as caught:
        pod_hostname(p, "cluster.local")
    assert str(caught.value).startswith(message)


# --- the file --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "behaviour, args, expected",
    [
        ("one IP, no domain", (["10.0.0.5"], "web", "", []),
         "# Kubernetes-managed hosts file.\n" + LOCALHOST + "10.0.0.5\tweb\n"),
        ("FQDN first, then the short name, for every pod IP", (["10.0.0.5", "fd00::5"], "db-0", "db.ns.svc.cl", []),
         "# Kubernetes-managed hosts file.\n" + LOCALHOST
         + "10.0.0.5\tdb-0.db.ns.svc.cl\tdb-0\nfd00::5\tdb-0.db.ns.svc.cl\tdb-0\n"),
        ("host aliases: one line per entry after a blank line and a header", (["10.0.0.5"], "web", "", ALIASES),
         "# Kubernetes-managed hosts file.\n" + LOCALHOST + "10.0.0.5\tweb\n"
         "\n# Entries added by HostAliases.\n10.1.2.3\tfoo.local\tbar.local\n10.1.2.4\tbaz\n"),
    ],
)  # fmt: skip
def test_managed_hosts_file(behaviour, args, expected):
    assert managed_hosts_file(*args) == expected


def test_host_network_copies_the_nodes_file_and_adds_aliases():
    node = "127.0.0.1 localhost\n192.0.2.7 node-a\n"
    assert host_network_hosts_file(node, ALIASES) == (
        "# Kubernetes-managed hosts file (host network).\n" + node
        + "\n# Entries added by HostAliases.\n10.1.2.3\tfoo.local\tbar.local\n10.1.2.4\tbaz\n"
    )
    assert host_network_hosts_file(node, []) == "# Kubernetes-managed hosts file (host network).\n" + node


def test_hosts_file_content_picks_by_network():
    own = pod(hostname="h", subdomain="s", hostAliases=[{"ip": "10.9.9.9", "hostnames": ["x"]}])
    assert hosts_file_content(own, pod_ips=["10.0.0.5"], cluster_domain="cl", node_hosts="IGNORED") == (
        "# Kubernetes-managed hosts file.\n" + LOCALHOST + "10.0.0.5\th.s.ns.svc.cl\th\n"
        "\n# Entries added by HostAliases.\n10.9.9.9\tx\n"
    )
    host = pod(hostNetwork=True)
    assert hosts_file_content(host, pod_ips=["192.0.2.7"], cluster_domain="cl", node_hosts="N\n") == (
        "# Kubernetes-managed hosts file (host network).\nN\n"
    )


@pytest.mark.parametrize(
    "behaviour, container, pod_ips, expected",
    [
        ("a pod with an IP", Container(name="c"), ["10.0.0.5"], True),
        ("no IP yet", Container(name="c"), [], False),
        ("the container mounts its own /etc/hosts", Container(name="c", volume_mounts=[
            VolumeMount(name="h", mount_path="/etc/hosts")]), ["10.0.0.5"], False),
    ],
)  # fmt: skip
def test_should_mount_hosts_file(behaviour, container, pod_ips, expected):
    assert should_mount_hosts_file(container, pod_ips) is expected


def test_hosts_mount():
    assert hosts_mount("/var/lib/pykubelet/pods/u1/etc-hosts") == api_pb2.Mount(
        container_path="/etc/hosts", host_path="/var/lib/pykubelet/pods/u1/etc-hosts", readonly=False,
        selinux_relabel=True,
    )  # fmt: skip
