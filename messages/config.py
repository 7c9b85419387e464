"""The kubelet's configuration as types: KubeletConfiguration (kubelet.config.k8s.io/v1beta1,
the --config file) and KubeletFlags (options that exist only as command-line flags).

cli/config.py builds both from the command line and the file; every actor reads them. Field
names on the wire are the Go kubelet's, defaults are SetDefaults_KubeletConfiguration's, and
durations are Go duration strings ("1m30s") held as seconds (Duration, a float).
"""

from __future__ import annotations

import ipaddress
import json
import re
from fractions import Fraction
from typing import Annotated, Any

import msgspec

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


# --- Go durations ---------------------------------------------------------------------


class DurationError(ValueError):
    """A string that Go's time.ParseDuration would refuse."""


class Duration(float):
    """A Go metav1.Duration, in seconds. Decodes from and encodes to "1m30s" strings."""

    def __str__(self) -> str:
        return format_duration(self)

    def __repr__(self) -> str:
        return f"Duration({format_duration(self)!r})"


_NS_PER_UNIT = {
    "ns": 1,
    "us": 1_000,
    "µs": 1_000,  # U+00B5 micro sign
    "μs": 1_000,  # U+03BC Greek mu
    "ms": 1_000_000,
    "s": 1_000_000_000,
    "m": 60 * 1_000_000_000,
    "h": 3600 * 1_000_000_000,
}
_COMPONENT = re.compile(r"(\d*)(?:\.(\d*))?([^\d.]*)")
_DURATION_HINT = 'a Go duration such as "1m30s", "10s" or "500ms" (units h, m, s, ms, us, ns)'


def _quote(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def parse_duration(text: str) -> Duration:
    """Go's time.ParseDuration: "2m", "1m30s", "1.5h", "500ms", "-1s", "0". Raises DurationError."""
    if not isinstance(text, str):
        raise DurationError(f"expected {_DURATION_HINT}, got {type(text).__name__} {text!r}")
    invalid = f"invalid duration {_quote(text)}"
    rest = text
    sign = -1 if rest.startswith("-") else 1
    rest = rest[1:] if rest[:1] in ("-", "+") else rest
    if rest == "0":
        return Duration(0.0)
    if not rest:
        raise DurationError(f"{invalid}: expected {_DURATION_HINT}")
    total_ns = 0
    pos = 0
    while pos < len(rest):
        match = _COMPONENT.match(rest, pos)
        whole, frac, unit = match.group(1), match.group(2), match.group(3)
        if not whole and not frac:
            raise DurationError(f"{invalid}: expected {_DURATION_HINT}")
        if not unit:
            raise DurationError(f"{invalid}: missing unit; expected {_DURATION_HINT}")
        if unit not in _NS_PER_UNIT:
            raise DurationError(f"{invalid}: unknown unit {_quote(unit)}; expected {_DURATION_HINT}")
        scale = _NS_PER_UNIT[unit]
        total_ns += int(whole or 0) * scale
        if frac:
            total_ns += int(frac) * scale // 10 ** len(frac)
        pos = match.end()
    if total_ns > 2**63 - 1:
        raise DurationError(f"{invalid}: longer than Go's maximum of about 292 years")
    return Duration(sign * total_ns / 1e9)


def format_duration(seconds: float) -> str:
    """Go's Duration.String(): 60 -> "1m0s", 0.5 -> "500ms", 5400 -> "1h30m0s", 0 -> "0s"."""
    ns = round(seconds * 1e9)
    if ns == 0:
        return "0s"
    sign, ns = ("-", -ns) if ns < 0 else ("", ns)

    def frac(value: int, digits: int) -> str:
        whole, part = divmod(value, 10**digits)
        tail = f"{part:0{digits}d}".rstrip("0")
        return f"{whole}.{tail}" if tail else str(whole)

    if ns < 1_000:
        return f"{sign}{ns}ns"
    if ns < 1_000_000:
        return f"{sign}{frac(ns, 3)}µs"
    if ns < 1_000_000_000:
        return f"{sign}{frac(ns, 6)}ms"
    hours, ns = divmod(ns, 3600 * 1_000_000_000)
    minutes, ns = divmod(ns, 60 * 1_000_000_000)
    out = f"{frac(ns, 9)}s"
    if hours or minutes:
        out = f"{minutes}m{out}"
    if hours:
        out = f"{hours}h{out}"
    return sign + out


def dec_hook(type_: type, obj: Any) -> Any:
    """msgspec decode hook for Duration (pass to msgspec.convert / msgspec.json.decode)."""
    if type_ is Duration:
        return parse_duration(obj)  # DurationError is a ValueError: msgspec adds the field path
    raise NotImplementedError(f"cannot decode {type_!r}")


def enc_hook(obj: Any) -> Any:
    """msgspec encode hook: a Duration goes out as Go writes it ("1m0s")."""
    if isinstance(obj, Duration):
        return format_duration(obj)
    raise NotImplementedError(f"cannot encode {type(obj)!r}")


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


_PYTHON_NAMES = go_field_names(KubeletConfiguration)


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


def validate_kubelet_configuration(config: KubeletConfiguration) -> list[tuple[str, str]]:
    """The checks of Go's ValidateKubeletConfiguration that apply to pykubelet, plus its own
    (periods must be positive, addresses must be IPs, the runtime endpoint must be usable).

    Returns every problem as (Go field path, problem), as Go collects them all.
    """
    problems: list[tuple[str, str]] = []

    def check(ok: bool, field: str, problem: str) -> None:
        if not ok:
            problems.append((field, problem))

    for field, off in (("port", None), ("healthzPort", "disable"), ("readOnlyPort", "disable")):
        value = getattr(config, _PYTHON_NAMES[field])
        allowed = "between 1 and 65535" + (f", or 0 to {off} it" if off else "")
        check(1 <= value <= 65535 or (off is not None and value == 0), field,
              f"port {value} is out of range: must be {allowed}")  # fmt: skip
    for field in ("address", "healthzBindAddress"):
        value = getattr(config, _PYTHON_NAMES[field])
        check(_is_ip(value), field, f"{_quote(value)} is not an IP address (e.g. 0.0.0.0 or ::)")
    for field in ("syncFrequency", "fileCheckFrequency", "httpCheckFrequency", "runtimeRequestTimeout",
                  "nodeStatusUpdateFrequency", "nodeStatusReportFrequency"):  # fmt: skip
        value = getattr(config, _PYTHON_NAMES[field])
        check(value > 0, field, f"{format_duration(value)} is too short: must be longer than 0s")
    check(config.logging.flush_frequency > 0, "logging.flushFrequency", "must be longer than 0s")
    check(config.image_minimum_gc_age >= 0, "imageMinimumGCAge", "must not be negative")
    check(config.node_lease_duration_seconds > 0, "nodeLeaseDurationSeconds",
          f"{config.node_lease_duration_seconds} must be greater than 0")  # fmt: skip
    for field in ("maxPods", "kubeAPIQPS", "kubeAPIBurst", "eventRecordQPS", "eventBurst"):
        value = getattr(config, _PYTHON_NAMES[field])
        check(value >= 0, field, f"{value} must not be negative")
    high, low = config.image_gc_high_threshold_percent, config.image_gc_low_threshold_percent
    check(0 <= high <= 100, "imageGCHighThresholdPercent", f"{high} must be between 0 and 100")
    check(0 <= low <= 100, "imageGCLowThresholdPercent", f"{low} must be between 0 and 100")
    check(low < high, "imageGCLowThresholdPercent",
          f"{low} must be less than imageGCHighThresholdPercent {high}")  # fmt: skip
    parallel = config.max_parallel_image_pulls
    check(parallel is None or parallel >= 1, "maxParallelImagePulls", f"{parallel} must be 1 or more")
    check(not (config.serialize_image_pulls and parallel is not None and parallel > 1),
          "maxParallelImagePulls", "must be 1 while serializeImagePulls is true")  # fmt: skip
    check(config.logging.format in LOGGING_FORMATS, "logging.format",
          f"{_quote(config.logging.format)} is not a logging format: use text or json")  # fmt: skip
    problems.extend(_vmodule_problems(config.logging))
    try:
        parse_byte_quantity(config.container_log_max_size)
    except ValueError as error:
        problems.append(("containerLogMaxSize", str(error)))
    check(config.container_log_max_files >= 2, "containerLogMaxFiles",
          f"{config.container_log_max_files} must be 2 or more: the log being written and at least "
          "one rotated file")  # fmt: skip
    check(config.container_log_max_workers >= 1, "containerLogMaxWorkers",
          f"{config.container_log_max_workers} must be 1 or more")  # fmt: skip
    interval = config.container_log_monitor_interval
    check(interval >= 3, "containerLogMonitorInterval",
          f"{format_duration(interval)} is too short: must be 3s or longer")  # fmt: skip
    problems.extend(_resource_problems(config))
    endpoint = config.container_runtime_endpoint
    check(endpoint == EMBEDDED_RUNTIME or (endpoint.startswith("unix:///") and len(endpoint) > 8),
          "containerRuntimeEndpoint",
          f"{_quote(endpoint)} is not a runtime endpoint pykubelet can use: "
          f"give unix:///path/to/runtime.sock or {EMBEDDED_RUNTIME}")  # fmt: skip
    return problems


def _vmodule_problems(logging: LoggingConfiguration) -> list[tuple[str, str]]:
    """Go's checks of logging.vmodule: text format only; patterns non-empty, without = or ,."""
    problems = []
    if logging.vmodule and logging.format not in ("", "text"):
        problems.append(("logging.vmodule", f"only supported for the text log format, not {_quote(logging.format)}"))
    for index, item in enumerate(logging.vmodule):
        if not item.file_pattern:
            problems.append((f"logging.vmodule[{index}]", "file pattern must not be empty"))
        elif any(c in item.file_pattern for c in "=,"):
            problems.append((f"logging.vmodule[{index}]",
                             f"{_quote(item.file_pattern)}: file pattern must not contain an equal sign or a comma"))
    return problems


def _resource_problems(config: KubeletConfiguration) -> list[tuple[str, str]]:
    """Cgroups, reserves and eviction thresholds: what Go refuses, and what pykubelet cannot
    apply (the systemd driver, enforcing the kube/system reserves on cgroups of their own)."""
    from pykubelet.pods.eviction_thresholds import ThresholdError, parse_thresholds  # pods/ imports this module
    from pykubelet.pods.node_allocatable import ReservationError, parse_reserved, validate_enforce_node_allocatable

    problems: list[tuple[str, str]] = []
    if config.cgroup_driver == "systemd":
        problems.append(("cgroupDriver", 'the systemd cgroup driver is not supported by pykubelet (it does not talk '
                         'to systemd): set cgroupDriver: cgroupfs, and SystemdCgroup = false in containerd\'s runc options'))
    elif config.cgroup_driver != "cgroupfs":
        problems.append(("cgroupDriver", f"{_quote(config.cgroup_driver)} is not a cgroup driver: use cgroupfs"))
    if config.cgroup_root and not config.cgroup_root.startswith("/"):
        problems.append(("cgroupRoot", f"{_quote(config.cgroup_root)} must be an absolute cgroup path such as /"))
    period = config.cpu_cfs_quota_period
    if not 0.001 <= period <= 1.0:
        problems.append(("cpuCFSQuotaPeriod", f"{format_duration(period)} must be between 1ms and 1s, inclusive"))
    for field in ("kubeReserved", "systemReserved"):
        try:
            parse_reserved(field, getattr(config, _PYTHON_NAMES[field]))
        except ReservationError as error:
            problems.append((field, str(error).removeprefix(f"{field}")))
    enforce = config.enforce_node_allocatable
    for problem in validate_enforce_node_allocatable(enforce, cgroups_per_qos=config.cgroups_per_qos):
        problems.append(("enforceNodeAllocatable", problem))
    beyond = [value for value in enforce if value not in ("pods", "none")]
    if beyond:
        problems.append(("enforceNodeAllocatable", f"pykubelet enforces only pods (or none), not {', '.join(beyond)}: "
                         "the kube and system reserves need kubeReservedCgroup/systemReservedCgroup, not supported"))
    try:
        parse_thresholds(config.eviction_hard, config.eviction_soft, config.eviction_soft_grace_period,
                         config.eviction_minimum_reclaim, enforce_node_allocatable=enforce)
    except ThresholdError as error:
        problems.append((error.field, str(error).removeprefix(f"{error.field}: ")))
    if config.eviction_max_pod_grace_period < 0:
        problems.append(("evictionMaxPodGracePeriod", f"{config.eviction_max_pod_grace_period} must not be negative"))
    return problems


# Go's resource.ParseQuantity: a signed decimal number, then a binary (Ki..Ei) or decimal
# (n, u, m, k, M..E) suffix or an exponent (e3, E-2).
_QUANTITY = re.compile(
    r"(?P<number>[+-]?(?:\d+(?:\.\d*)?|\.\d+))"
    r"(?:(?P<binary>Ki|Mi|Gi|Ti|Pi|Ei)|[eE](?P<exponent>[+-]?\d+)|(?P<decimal>[numkMGTPE]))?"
)
_BINARY_SUFFIX = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}  # powers of 2
_DECIMAL_SUFFIX = {"n": -9, "u": -6, "m": -3, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}  # of 10
_QUANTITY_HINT = 'a quantity of bytes such as "10Mi", "500Ki" or "100M"'


def parse_byte_quantity(text: str) -> int:
    """A Kubernetes quantity that must be a whole number ("10Mi" -> 10485760), as Go's
    resource.ParseQuantity followed by AsInt64 reads containerLogMaxSize. Raises ValueError."""
    match = _QUANTITY.fullmatch(text) if isinstance(text, str) else None
    if match is None:
        raise ValueError(f"{_quote(str(text))} is not a quantity: give {_QUANTITY_HINT}")
    value = Fraction(match["number"])
    if match["binary"]:
        value *= 2 ** _BINARY_SUFFIX[match["binary"]]
    else:
        power = int(match["exponent"]) if match["exponent"] else _DECIMAL_SUFFIX.get(match["decimal"] or "", 0)
        if value and abs(power) > 40:  # far past int64 either way: not a whole number of bytes
            value = Fraction(1, 2) if power < 0 else Fraction(2**64)
        else:
            value *= Fraction(10) ** power
    if value.denominator != 1 or not -(2**63) <= value < 2**63:
        raise ValueError(f"{_quote(text)} is not a whole number of bytes that fits in 64 bits: give {_QUANTITY_HINT}")
    return int(value)


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


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
