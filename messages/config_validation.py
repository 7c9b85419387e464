"""The checks of a KubeletConfiguration (Go's ValidateKubeletConfiguration, plus what
pykubelet cannot apply), each problem as (Go field path, problem); and the byte quantities
(containerLogMaxSize) as Go's resource.ParseQuantity reads them. cli/config/ calls them."""

from __future__ import annotations

import ipaddress
import json
import re
from fractions import Fraction

from .config import EMBEDDED_RUNTIME, LOGGING_FORMATS, KubeletConfiguration, LoggingConfiguration, go_field_names
from .duration import format_duration

_PYTHON_NAMES = go_field_names(KubeletConfiguration)


def _quote(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


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
