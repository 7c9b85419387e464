"""The kubelet's configuration as types: KubeletConfiguration (kubelet.config.k8s.io/v1beta1,
the --config file) with its defaults, and KubeletFlags (options that exist only as
command-line flags).

cli/config/ builds both from the command line and the file; every actor reads them. Field
names on the wire are the Go kubelet's, defaults are SetDefaults_KubeletConfiguration's, and
durations are Go duration strings ("1m30s") held as seconds (messages/duration.py); the checks
are in messages/config_validation.py.
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec

from .duration import Duration, enc_hook

API_VERSION = "kubelet.config.k8s.io/v1beta1"
KIND = "KubeletConfiguration"
DEFAULT_ROOT_DIR = "/var/lib/pykubelet"
DEFAULT_RUNTIME_ENDPOINT = "unix:///run/containerd/containerd.sock"
EMBEDDED_RUNTIME = "embedded"
LOGGING_FORMATS = ("text", "json")
# evictionHard when a file does not set it (Go: eviction/defaults_linux.go).
DEFAULT_EVICTION_HARD = {
    "memory.available": "100Mi", "nodefs.available": "10%", "nodefs.inodesFree": "5%",
    "imagefs.available": "15%", "imagefs.inodesFree": "5%",
}  # fmt: skip

Int32 = Annotated[int, msgspec.Meta(ge=-(2**31), le=2**31 - 1)]
UInt32 = Annotated[int, msgspec.Meta(ge=0, le=2**32 - 1)]
Int64 = Annotated[int, msgspec.Meta(ge=-(2**63), le=2**63 - 1)]


# --- KubeletConfiguration ----------------------------------------------------------------


class _GoStruct(msgspec.Struct, kw_only=True, rename="camel", forbid_unknown_fields=True, frozen=True):
    """Go JSON names (camelCase), strict decoding; subclasses inherit the settings."""


class VModuleItem(_GoStruct):
    file_pattern: str
    verbosity: UInt32


class LoggingConfiguration(_GoStruct):
    """component-base logs/api/v1 LoggingConfiguration, as embedded under `logging:`."""

    format: str = "text"
    # Go takes a duration string or an integer of nanoseconds here; the loader turns both
    # into a Duration before decoding.
    flush_frequency: Duration = Duration(5.0)
    verbosity: UInt32 = 0
    vmodule: list[VModuleItem] = []
    options: dict[str, Any] = {}  # [Alpha] per-format options; accepted, not used


def _go(name: str, default: Any = msgspec.NODEFAULT, **kw: Any) -> Any:
    """A field whose Go JSON name is not what rename="camel" makes of the Python name."""
    return msgspec.field(default=default, name=name, **kw)


# Authentication and authorization of the kubelet API (k8s.io/kubelet/config/v1beta1
# KubeletAuthentication, KubeletAuthorization). Go's *bool fields are plain bools here: a
# file that leaves them out gets the default, one that says false keeps false.

AUTHORIZATION_MODE_ALWAYS_ALLOW = "AlwaysAllow"
AUTHORIZATION_MODE_WEBHOOK = "Webhook"
AUTHORIZATION_MODES = (AUTHORIZATION_MODE_ALWAYS_ALLOW, AUTHORIZATION_MODE_WEBHOOK)


class KubeletX509Authentication(_GoStruct):
    client_ca_file: str = _go("clientCAFile", "")  # "" = client certificates are not accepted


class KubeletWebhookAuthentication(_GoStruct):
    enabled: bool = True  # bearer tokens checked with TokenReviews to the API server
    cache_ttl: Duration = _go("cacheTTL", Duration(120.0))


class KubeletAnonymousAuthentication(_GoStruct):
    enabled: bool = False  # requests without credentials run as system:anonymous


class KubeletAuthentication(_GoStruct):
    x509: KubeletX509Authentication = msgspec.field(default_factory=KubeletX509Authentication)
    webhook: KubeletWebhookAuthentication = msgspec.field(default_factory=KubeletWebhookAuthentication)
    anonymous: KubeletAnonymousAuthentication = msgspec.field(default_factory=KubeletAnonymousAuthentication)


class KubeletWebhookAuthorization(_GoStruct):
    cache_authorized_ttl: Duration = _go("cacheAuthorizedTTL", Duration(300.0))
    cache_unauthorized_ttl: Duration = _go("cacheUnauthorizedTTL", Duration(30.0))


class KubeletAuthorization(_GoStruct):
    mode: str = AUTHORIZATION_MODE_WEBHOOK  # or AlwaysAllow
    webhook: KubeletWebhookAuthorization = msgspec.field(default_factory=KubeletWebhookAuthorization)


class KubeletConfiguration(_GoStruct):
    """The fields of kubelet.config.k8s.io/v1beta1 KubeletConfiguration that pykubelet honours.

    Defaults are the Go kubelet's. Fields the Go type has and pykubelet does not implement are
    listed in GO_ONLY_FIELDS: a file may carry them, the loader drops them with a warning.
    """

    api_version: str = API_VERSION
    kind: str = KIND

    # Pod sources
    static_pod_path: str = ""
    static_pod_url: str = _go("staticPodURL", "")
    static_pod_url_header: dict[str, list[str]] = _go("staticPodURLHeader", default_factory=dict)
    sync_frequency: Duration = Duration(60.0)
    file_check_frequency: Duration = Duration(20.0)
    http_check_frequency: Duration = Duration(20.0)

    # Servers
    enable_server: bool = True
    address: str = "0.0.0.0"
    port: Int32 = 10250
    read_only_port: Int32 = 0  # 0 = off
    enable_debugging_handlers: bool = True
    tls_cert_file: str = ""  # "" with tlsPrivateKeyFile "": self-signed in --cert-dir
    tls_private_key_file: str = ""
    tls_min_version: str = ""  # "": VersionTLS12
    tls_cipher_suites: list[str] = []  # []: the TLS library's defaults
    healthz_port: Int32 = 10248  # 0 = off
    healthz_bind_address: str = "127.0.0.1"
    authentication: KubeletAuthentication = msgspec.field(default_factory=KubeletAuthentication)
    authorization: KubeletAuthorization = msgspec.field(default_factory=KubeletAuthorization)

    # Runtime
    container_runtime_endpoint: str = DEFAULT_RUNTIME_ENDPOINT  # or "embedded" (pykubelet)
    runtime_request_timeout: Duration = Duration(120.0)
    pod_logs_dir: str = "/var/log/pods"
    max_pods: Int32 = 110
    pod_pids_limit: Int64 = -1
    serialize_image_pulls: bool = True
    max_parallel_image_pulls: Int32 | None = None
    image_minimum_gc_age: Duration = _go("imageMinimumGCAge", Duration(120.0))
    image_gc_high_threshold_percent: Int32 = _go("imageGCHighThresholdPercent", 85)
    image_gc_low_threshold_percent: Int32 = _go("imageGCLowThresholdPercent", 80)

    # Cgroups and resources (actors/container_manager.py)
    cgroups_per_qos: bool = _go("cgroupsPerQOS", True)
    cgroup_driver: str = "cgroupfs"  # "systemd" is refused: pykubelet does not talk to systemd
    cgroup_root: str = ""  # "": the root, "/"
    cpu_cfs_quota: bool = _go("cpuCFSQuota", True)
    cpu_cfs_quota_period: Duration = _go("cpuCFSQuotaPeriod", Duration(0.1))
    fail_cgroup_v1: bool = True  # Go >= 1.35: refuse to start on cgroup v1
    kube_reserved: dict[str, str] = {}
    system_reserved: dict[str, str] = {}
    enforce_node_allocatable: list[str] = msgspec.field(default_factory=lambda: ["pods"])

    # Eviction (actors/eviction_manager.py). A file's evictionHard replaces the defaults unless
    # mergeDefaultEvictionSettings (set_defaults merges them).
    eviction_hard: dict[str, str] = msgspec.field(default_factory=lambda: dict(DEFAULT_EVICTION_HARD))
    eviction_soft: dict[str, str] = {}
    eviction_soft_grace_period: dict[str, str] = {}
    eviction_pressure_transition_period: Duration = Duration(300.0)
    eviction_max_pod_grace_period: Int32 = 0
    eviction_minimum_reclaim: dict[str, str] = {}
    merge_default_eviction_settings: bool = False
    local_storage_capacity_isolation: bool = True

    # Container log rotation (actors/log_rotation.py)
    container_log_max_size: str = "10Mi"  # a quantity of bytes; a negative one turns rotation off
    container_log_max_files: Int32 = 5  # the log being written included
    container_log_max_workers: Int32 = 1
    container_log_monitor_interval: Duration = Duration(10.0)

    # Pod DNS
    cluster_domain: str = ""
    cluster_dns: list[str] = _go("clusterDNS", default_factory=list)
    resolv_conf: str = "/etc/resolv.conf"  # "" = no DNS from the host

    # Node and API server
    register_node: bool = True
    node_status_update_frequency: Duration = Duration(10.0)
    node_status_report_frequency: Duration = Duration(300.0)
    node_lease_duration_seconds: Int32 = 40
    kube_api_qps: Int32 = _go("kubeAPIQPS", 50)
    kube_api_burst: Int32 = _go("kubeAPIBurst", 100)
    event_record_qps: Int32 = _go("eventRecordQPS", 50)
    event_burst: Int32 = 100

    logging: LoggingConfiguration = msgspec.field(default_factory=LoggingConfiguration)


def go_field_names(struct_type: type[msgspec.Struct]) -> dict[str, str]:
    """{Go JSON name: Python attribute} for a Struct type."""
    return {f.encode_name: f.name for f in msgspec.structs.fields(struct_type)}


# Fields of the Go v1beta1 KubeletConfiguration (k8s.io/kubelet/config/v1beta1/types.go) that
# pykubelet does not implement. A real config file (kubeadm writes several) may carry them:
# they are Go kubelet options, not typos, so the loader ignores them with a warning rather
# than failing as it does for an unknown name.
GO_ONLY_FIELDS = frozenset({
    "allowedUnsafeSysctls", "configMapAndSecretChangeDetectionStrategy", "contentType",
    "cpuManagerPolicy", "cpuManagerPolicyOptions", "cpuManagerReconcilePeriod", "crashLoopBackOff",
    "draManagerReconcilePeriod", "enableContentionProfiling", "enableControllerAttachDetach",
    "enableDebugFlagsHandler", "enableProfilingHandler", "enableSystemLogHandler",
    "enableSystemLogQuery", "failSwapOn", "featureGates", "hairpinMode", "imageMaximumGCAge",
    "imagePullCredentialsVerificationPolicy", "imageServiceEndpoint", "iptablesDropBit",
    "iptablesMasqueradeBit", "kernelMemcgNotification", "kubeletCgroups", "kubeReservedCgroup",
    "makeIPTablesUtilChains", "maxOpenFiles", "memoryManagerPolicy", "memoryReservationPolicy",
    "memorySwap", "memoryThrottlingFactor", "nodeStatusMaxImages", "oomScoreAdj", "podCIDR",
    "podHousekeepingPeriod", "podsPerCore", "preloadedImagesVerificationAllowlist",
    "protectKernelDefaults", "providerID", "qosReserved", "registerWithTaints", "registryBurst",
    "registryPullQPS", "reservedMemory", "reservedSystemCPUs", "rotateCertificates", "runOnce",
    "seccompDefault", "serverTLSBootstrap", "showHiddenMetricsForVersion", "shutdownGracePeriod",
    "shutdownGracePeriodByPodPriority", "shutdownGracePeriodCriticalPods", "singleProcessOOMKill",
    "streamingConnectionIdleTimeout", "systemCgroups", "systemReservedCgroup",
    "tlsCurvePreferences", "topologyManagerPolicy", "topologyManagerPolicyOptions",
    "topologyManagerScope", "tracing", "userNamespaces", "volumePluginDir", "volumeStatsAggPeriod",
})  # fmt: skip

# Go fields whose zero value SetDefaults_KubeletConfiguration replaces with the default (plain
# values in Go, not pointers): `port: 0` in a file means 10250, `syncFrequency: 0s` means 1m.
# Pointer fields (healthzPort, registerNode, enableServer, ...) keep an explicit 0 or false.
_ZERO_MEANS_DEFAULT = (
    "sync_frequency", "file_check_frequency", "http_check_frequency", "address", "port",
    "healthz_bind_address", "node_status_update_frequency", "node_lease_duration_seconds",
    "image_minimum_gc_age", "runtime_request_timeout", "max_pods", "kube_api_burst",
    "event_burst", "container_runtime_endpoint", "pod_logs_dir", "container_log_max_size",
)  # fmt: skip


def set_defaults(config: KubeletConfiguration, given: frozenset[str] | set[str]) -> KubeletConfiguration:
    """SetDefaults_KubeletConfiguration applied to a decoded file.

    `given` holds the Go names of the fields the file set; it matters where a Go default
    depends on another field (nodeStatusReportFrequency, serializeImagePulls).
    """
    blank = KubeletConfiguration()
    changes: dict[str, Any] = {}
    for name in _ZERO_MEANS_DEFAULT:
        if not getattr(config, name):
            changes[name] = getattr(blank, name)
    if config.pod_pids_limit < 0:
        changes["pod_pids_limit"] = -1
    if "nodeStatusReportFrequency" not in given or not config.node_status_report_frequency:
        # Go, for backward compatibility: an explicit update frequency is the report one too.
        update = config.node_status_update_frequency if "nodeStatusUpdateFrequency" in given else 0
        changes["node_status_report_frequency"] = update or blank.node_status_report_frequency
    if "serializeImagePulls" not in given:
        parallel = config.max_parallel_image_pulls
        changes["serialize_image_pulls"] = parallel is None or parallel < 2
    changes.update(_auth_defaults(config))
    if "evictionHard" in given and config.merge_default_eviction_settings:
        changes["eviction_hard"] = {**DEFAULT_EVICTION_HARD, **config.eviction_hard}
    logging = config.logging
    if not logging.format or not logging.flush_frequency:
        logging = msgspec.structs.replace(
            logging,
            format=logging.format or "text",
            flush_frequency=logging.flush_frequency or Duration(5.0),
        )
        changes["logging"] = logging
    return msgspec.structs.replace(config, **changes) if changes else config


def _auth_defaults(config: KubeletConfiguration) -> dict[str, Any]:
    """Go's zero values in authentication/authorization replaced by the defaults."""
    changes: dict[str, Any] = {}
    authn, authz = config.authentication, config.authorization
    if not authn.webhook.cache_ttl:
        webhook = msgspec.structs.replace(authn.webhook, cache_ttl=KubeletWebhookAuthentication().cache_ttl)
        changes["authentication"] = msgspec.structs.replace(authn, webhook=webhook)
    blank = KubeletWebhookAuthorization()
    webhook_authz = msgspec.structs.replace(
        authz.webhook,
        cache_authorized_ttl=authz.webhook.cache_authorized_ttl or blank.cache_authorized_ttl,
        cache_unauthorized_ttl=authz.webhook.cache_unauthorized_ttl or blank.cache_unauthorized_ttl,
    )
    if webhook_authz != authz.webhook or not authz.mode:
        changes["authorization"] = msgspec.structs.replace(
            authz, mode=authz.mode or AUTHORIZATION_MODE_WEBHOOK, webhook=webhook_authz
        )
    return changes


def encode_kubelet_configuration(config: KubeletConfiguration) -> bytes:
    """JSON with the Go names and duration strings, as the Go kubelet's /configz shows it."""
    return msgspec.json.encode(config, enc_hook=enc_hook)


# --- KubeletFlags ------------------------------------------------------------------------


class KubeletFlags(msgspec.Struct, kw_only=True, frozen=True):
    """Options that exist only as flags in the Go kubelet (its KubeletFlags), plus ours."""

    config: str | None = None  # --config: path of the KubeletConfiguration file
    kubeconfig: str | None = None  # absent: standalone mode (no API server)
    root_dir: str = DEFAULT_ROOT_DIR
    hostname_override: str | None = None
    node_ip: tuple[str, ...] = ()  # --node-ip: one address, or one of each family
    node_labels: dict[str, str] = {}
    enable_fault_injection: bool = False  # pykubelet: allows POST /debug/actors/{path}/crash
    run_once: bool = False  # --runonce: run the static pods once, exit with their result
    cert_dir: str = ""  # --cert-dir: where the self-signed serving certificate goes ("": <root-dir>/pki)
