"""A pod's DNS settings for the CRI sandbox (pure): Go's dns.Configurer.GetPodDNS.

The caller reads the node's resolv.conf (--resolv-conf) and passes its text with the
kubelet's clusterDNS and clusterDomain; the answer is the sandbox's DNSConfig and the
warnings Go records as events (MissingClusterDNS, DNSConfigForming).
Go: pkg/kubelet/network/dns/dns.go.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from pykubelet.messages.cri_api import api_pb2
from pykubelet.messages.pod import Pod, PodDNSConfigOption

from .security_context import format_pod

# pkg/apis/core/validation: the limits the API server applies to dnsConfig too.
MAX_DNS_NAMESERVERS = 3
MAX_DNS_SEARCH_PATHS = 32
MAX_DNS_SEARCH_LIST_CHARS = 2048
MAX_SEARCH_PATH_CHARS = 253  # longer ones make some resolvers (glibc 2.28) abort
DEFAULT_DNS_OPTIONS = ("ndots:5",)

MISSING_CLUSTER_DNS = "MissingClusterDNS"
DNS_CONFIG_FORMING = "DNSConfigForming"

CLUSTER_FIRST = "ClusterFirst"
CLUSTER_FIRST_WITH_HOST_NET = "ClusterFirstWithHostNet"
DEFAULT = "Default"
NONE = "None"


class ResolvConfError(ValueError):
    """The node's resolv.conf cannot be used (Go fails the sandbox with it)."""


@dataclass(frozen=True)
class ResolvConf:
    nameservers: tuple[str, ...] = ()
    searches: tuple[str, ...] = ()
    options: tuple[str, ...] = ()
    domain: str = ""  # parsed for completeness; Go ignores the domain line


@dataclass(frozen=True)
class DNSWarning:
    """A Warning event for the pod; node_message, when set, is also recorded on the Node."""

    reason: str
    message: str
    node_message: str = ""


def parse_resolv_conf(text: str) -> ResolvConf:
    """Go's parseResolvConf: nameservers accumulate, the last search line wins (trailing
    dots dropped, "." skipped), options accumulate with a later one of the same name
    replacing the earlier; lines starting with # are comments."""
    nameservers: list[str] = []
    searches: list[str] = []
    options: list[str] = []
    domain = ""
    for line in text.split("\n"):
        line = line.strip()
        if line.startswith("#"):
            continue
        fields = line.split()
        if not fields:
            continue
        keyword, args = fields[0], fields[1:]
        if keyword == "nameserver":
            if not args:
                raise ResolvConfError("nameserver list is empty ")
            nameservers.append(args[0])
        elif keyword == "search":
            searches = [s.removesuffix(".") for s in args if s != "."]
        elif keyword == "options":
            options = _append_options(options, args)
        elif keyword == "domain" and args:
            domain = args[0]
    return ResolvConf(tuple(nameservers), tuple(searches), tuple(options), domain)


def pod_dns_config(
    pod: Pod,
    *,
    cluster_dns: Sequence[str],
    cluster_domain: str,
    host_resolv_conf: str | None,
    node_ips: Sequence[str] = (),
) -> tuple[api_pb2.DNSConfig, list[DNSWarning]]:
    """The sandbox's DNS for every dnsPolicy, and the warnings to record.

    host_resolv_conf: the text of the kubelet's --resolv-conf file, or None when
    resolvConf is "" (then a host-DNS pod gets 127.0.0.1, or ::1 on an IPv6 node, and the
    search ".", which effectively turns lookups off, as in Go). An empty string is an
    empty file: no servers at all."""
    warnings: list[DNSWarning] = []
    host = parse_resolv_conf(host_resolv_conf) if host_resolv_conf is not None else ResolvConf()
    servers, searches, options = list(host.nameservers), list(host.searches), list(host.options)
    policy = _effective_policy(pod)
    if policy == NONE:
        servers, searches, options = [], [], []
    elif policy == CLUSTER_FIRST and cluster_dns:
        # The cluster DNS server is the pod's only server: it forwards what it cannot answer.
        servers = [_canonical_ip(ip) for ip in cluster_dns]
        searches = _cluster_searches(pod.metadata.namespace, cluster_domain, searches)
        options = list(DEFAULT_DNS_OPTIONS)
    else:
        if policy == CLUSTER_FIRST:
            node_message = (
                f'kubelet does not have ClusterDNS IP configured and cannot create Pod using "{CLUSTER_FIRST}" '
                f'policy. Falling back to "{DEFAULT}" policy.'
            )
            pod_message = f'pod: "{format_pod(pod)}". {node_message}'
            warnings.append(DNSWarning(MISSING_CLUSTER_DNS, pod_message, node_message))
        if host_resolv_conf is None:
            servers = ["::1" if _is_ipv6(ip) else "127.0.0.1" for ip in node_ips] or ["127.0.0.1"]
            searches = ["."]
    extra = pod.spec.dns_config
    if extra is not None:
        servers = _omit_duplicates([*servers, *extra.nameservers])
        searches = _omit_duplicates([*searches, *extra.searches])
        options = merge_dns_options(options, extra.options)
    servers, searches = _fit_limits(servers, searches, warnings)
    return api_pb2.DNSConfig(servers=servers, searches=searches, options=options), warnings


def resolv_conf_limit_warning(text: str, path: str, cluster_domain: str) -> str | None:
    """Go's CheckLimitsForResolvConf, run once at start: a node search line that would
    crowd out the pods' own (message for a CheckLimitsForResolvConf event on the Node)."""
    try:
        searches = parse_resolv_conf(text).searches
    except ResolvConfError as exc:
        return str(exc)
    limit = MAX_DNS_SEARCH_PATHS - (3 if cluster_domain else 0)
    if len(searches) > limit:
        return f"Resolv.conf file '{path}' contains search line consisting of more than {limit} domains!"
    if any(len(s) > MAX_SEARCH_PATH_CHARS for s in searches):
        return (
            f'Resolv.conf file "{path}" contains a search path which length is more than allowed '
            f"{MAX_SEARCH_PATH_CHARS} chars!"
        )
    if len(" ".join(searches)) > MAX_DNS_SEARCH_LIST_CHARS:
        return (
            f"Resolv.conf file '{path}' contains search line which length is more than allowed "
            f"{MAX_DNS_SEARCH_LIST_CHARS} chars!"
        )
    return None


def merge_dns_options(existing: Iterable[str], extra: Iterable[PodDNSConfigOption]) -> list[str]:
    """Go's mergeDNSOptions: the pod's options replace the same-named ones. Go builds a
    map, so its order is random; here existing ones keep their place, new ones follow."""
    merged: dict[str, str] = {}
    for option in existing:
        name, _, value = option.partition(":")
        merged[name] = value
    for option in extra:
        merged[option.name] = option.value or ""
    return [f"{name}:{value}" if value else name for name, value in merged.items()]


def _effective_policy(pod: Pod) -> str:
    """Go's getPodDNSType; an unset or unknown policy is ClusterFirst."""
    policy = pod.spec.dns_policy
    if policy in (NONE, DEFAULT):
        return policy
    if policy == CLUSTER_FIRST_WITH_HOST_NET:
        return CLUSTER_FIRST
    # ClusterFirst on the host network falls back to the host's DNS.
    return DEFAULT if pod.spec.host_network else CLUSTER_FIRST


def _cluster_searches(namespace: str, cluster_domain: str, host_searches: list[str]) -> list[str]:
    if not cluster_domain:
        return host_searches
    cluster = [f"{namespace}.svc.{cluster_domain}", f"svc.{cluster_domain}", cluster_domain]
    return _omit_duplicates([*cluster, *host_searches])


def _fit_limits(servers: list[str], searches: list[str], warnings: list[DNSWarning]) -> tuple[list[str], list[str]]:
    """Go's formDNSConfigFitsLimits: trim, and say what was applied."""
    if len(servers) > MAX_DNS_NAMESERVERS:
        servers = servers[:MAX_DNS_NAMESERVERS]
        warnings.append(DNSWarning(
            DNS_CONFIG_FORMING,
            "Nameserver limits were exceeded, some nameservers have been omitted, the applied nameserver line "
            f"is: {' '.join(servers)}",
        ))  # fmt: skip
    exceeded = len(searches) > MAX_DNS_SEARCH_PATHS
    fitting = [s for s in searches[:MAX_DNS_SEARCH_PATHS] if len(s) <= MAX_SEARCH_PATH_CHARS]
    exceeded = exceeded or len(fitting) < len(searches[:MAX_DNS_SEARCH_PATHS])
    while fitting and len(" ".join(fitting)) > MAX_DNS_SEARCH_LIST_CHARS:
        fitting.pop()  # from the end, as Go cuts
        exceeded = True
    if exceeded:
        warnings.append(DNSWarning(
            DNS_CONFIG_FORMING,
            "Search Line limits were exceeded, some search paths have been omitted, the applied search line "
            f"is: {' '.join(fitting)}",
        ))  # fmt: skip
    return servers, fitting


def _append_options(options: list[str], new: Iterable[str]) -> list[str]:
    by_name = {option.split(":")[0]: option for option in options}
    for option in new:
        by_name[option.split(":")[0]] = option
    return list(by_name.values())


def _omit_duplicates(items: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(items))


def _canonical_ip(text: str) -> str:
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        return text


def _is_ipv6(text: str) -> bool:
    try:
        return ipaddress.ip_address(text).version == 6
    except ValueError:
        return False
