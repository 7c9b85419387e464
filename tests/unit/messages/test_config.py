"""KubeletConfiguration: Go names and defaults, Go durations, defaulting and validation."""

from __future__ import annotations

import json

import msgspec
import pytest

from pykubelet.messages.config import (
    GO_ONLY_FIELDS,
    KubeletConfiguration,
    KubeletFlags,
    LoggingConfiguration,
    encode_kubelet_configuration,
    go_field_names,
    set_defaults,
)
from pykubelet.messages.config_validation import parse_byte_quantity, validate_kubelet_configuration
from pykubelet.messages.duration import Duration, DurationError, dec_hook, format_duration, parse_duration


@pytest.mark.parametrize(
    "text, seconds",
    [
        ("2m", 120.0),
        ("10s", 10.0),
        ("1m30s", 90.0),
        ("500ms", 0.5),
        ("1.5h", 5400.0),
        ("1h2m3.5s", 3723.5),
        (".5s", 0.5),
        ("1.s", 1.0),
        ("250us", 0.00025),
        ("250µs", 0.00025),
        ("7ns", 7e-9),
        ("-1s", -1.0),
        ("+3s", 3.0),
        ("0", 0.0),
    ],
)
def test_go_durations_parse_to_seconds(text, seconds):
    assert parse_duration(text) == pytest.approx(seconds)
    assert isinstance(parse_duration(text), Duration)


@pytest.mark.parametrize(
    "text, problem",
    [
        ("", "invalid duration"),
        ("10", "missing unit"),
        ("5x", 'unknown unit "x"'),
        ("1d", 'unknown unit "d"'),
        ("s", "invalid duration"),
        ("1m 30s", 'unknown unit "m "'),
    ],
)
def test_bad_durations_are_refused_with_the_go_form_to_use(text, problem):
    with pytest.raises(DurationError) as caught:
        parse_duration(text)
    assert problem in str(caught.value)
    assert '"1m30s"' in str(caught.value)


def test_a_duration_longer_than_go_can_hold_is_refused():
    with pytest.raises(DurationError, match="292 years"):
        parse_duration("9999999999h")


def test_a_number_is_not_a_duration():
    with pytest.raises(DurationError, match="got int 60"):
        parse_duration(60)


@pytest.mark.parametrize(
    "seconds, text",
    [(60, "1m0s"), (0, "0s"), (0.5, "500ms"), (5400, "1h30m0s"), (90.25, "1m30.25s"), (1.5e-6, "1.5µs"),
     (-2, "-2s"), (10, "10s")],
)  # fmt: skip
def test_durations_format_as_go_prints_them(seconds, text):
    assert format_duration(seconds) == text
    assert parse_duration(text) == pytest.approx(seconds)


def test_defaults_are_the_go_kubelets():
    config = KubeletConfiguration()
    assert (config.api_version, config.kind) == ("kubelet.config.k8s.io/v1beta1", "KubeletConfiguration")
    assert config.sync_frequency == 60
    assert config.file_check_frequency == 20
    assert config.http_check_frequency == 20
    assert config.node_status_update_frequency == 10
    assert config.node_status_report_frequency == 300
    assert config.runtime_request_timeout == 120
    assert (config.address, config.port, config.read_only_port) == ("0.0.0.0", 10250, 0)
    assert (config.healthz_bind_address, config.healthz_port) == ("127.0.0.1", 10248)
    assert config.container_runtime_endpoint == "unix:///run/containerd/containerd.sock"
    assert config.max_pods == 110
    assert config.pod_pids_limit == -1
    assert config.register_node is True and config.enable_server is True
    assert config.node_lease_duration_seconds == 40
    assert (config.image_gc_high_threshold_percent, config.image_gc_low_threshold_percent) == (85, 80)
    assert config.logging == LoggingConfiguration(format="text", flush_frequency=Duration(5), verbosity=0)
    assert (config.container_log_max_size, config.container_log_max_files) == ("10Mi", 5)
    assert (config.container_log_monitor_interval, config.container_log_max_workers) == (10, 1)
    assert validate_kubelet_configuration(config) == []


def test_flags_default_to_standalone_mode_under_var_lib_pykubelet():
    flags = KubeletFlags()
    assert flags.kubeconfig is None
    assert flags.root_dir == "/var/lib/pykubelet"
    assert flags.enable_fault_injection is False
    assert (flags.hostname_override, flags.node_ip, flags.node_labels) == (None, (), {})


def test_field_names_on_the_wire_are_the_go_names():
    names = go_field_names(KubeletConfiguration)
    for go_name in ("apiVersion", "healthzPort", "healthzBindAddress", "staticPodURL", "staticPodURLHeader",
                    "runtimeRequestTimeout", "containerRuntimeEndpoint", "nodeStatusUpdateFrequency",
                    "readOnlyPort", "maxPods", "registerNode", "imageGCHighThresholdPercent",
                    "kubeAPIQPS", "clusterDNS", "resolvConf", "logging", "containerLogMaxSize",
                    "containerLogMaxFiles", "containerLogMonitorInterval", "containerLogMaxWorkers"):  # fmt: skip
        assert go_name in names
    assert not set(names) & GO_ONLY_FIELDS


def test_decoding_is_strict_about_names_and_types():
    decode = lambda raw: msgspec.convert(raw, KubeletConfiguration, dec_hook=dec_hook)  # noqa: E731
    assert decode({"syncFrequency": "1m30s", "staticPodURL": "http://x"}).sync_frequency == 90
    with pytest.raises(msgspec.ValidationError, match="unknown field `helthzPort`"):
        decode({"helthzPort": 1})
    with pytest.raises(msgspec.ValidationError, match="unknown field `staticPodUrl`"):
        decode({"staticPodUrl": "http://x"})
    with pytest.raises(msgspec.ValidationError, match="Expected `int`, got `str`"):
        decode({"healthzPort": "10248"})
    with pytest.raises(msgspec.ValidationError, match=r"invalid duration .* at `\$.syncFrequency`"):
        decode({"syncFrequency": "5x"})
    with pytest.raises(msgspec.ValidationError, match="<= 2147483647"):
        decode({"port": 2**31})


def test_the_encoded_form_is_the_go_one():
    encoded = json.loads(encode_kubelet_configuration(KubeletConfiguration()))
    assert encoded["syncFrequency"] == "1m0s"
    assert encoded["runtimeRequestTimeout"] == "2m0s"
    assert encoded["logging"]["flushFrequency"] == "5s"
    assert encoded["staticPodURL"] == "" and encoded["healthzPort"] == 10248


@pytest.mark.parametrize(
    "given, expected",
    [
        # Go replaces the zero value of a plain (non-pointer) field with the default ...
        (dict(port=0), dict(port=10250)),
        (dict(max_pods=0), dict(max_pods=110)),
        (dict(sync_frequency=Duration(0)), dict(sync_frequency=60)),
        (dict(address=""), dict(address="0.0.0.0")),
        (dict(container_runtime_endpoint=""),
         dict(container_runtime_endpoint="unix:///run/containerd/containerd.sock")),
        (dict(pod_pids_limit=-5), dict(pod_pids_limit=-1)),
        (dict(container_log_max_size=""), dict(container_log_max_size="10Mi")),
        # ... but keeps an explicit zero or false of a pointer field.
        (dict(healthz_port=0), dict(healthz_port=0)),
        (dict(register_node=False), dict(register_node=False)),
        (dict(read_only_port=0), dict(read_only_port=0)),
        (dict(container_log_max_files=0), dict(container_log_max_files=0)),
        (dict(container_log_max_workers=0), dict(container_log_max_workers=0)),
        (dict(container_log_monitor_interval=Duration(0)), dict(container_log_monitor_interval=0)),
    ],
)
def test_set_defaults_replaces_zero_values_where_go_does(given, expected):
    config = set_defaults(KubeletConfiguration(**given), frozenset())
    for name, value in expected.items():
        assert getattr(config, name) == value


def _decode(raw: dict) -> KubeletConfiguration:
    return msgspec.convert(raw, KubeletConfiguration, dec_hook=dec_hook)


def test_authentication_and_authorization_default_as_v1beta1():
    config = KubeletConfiguration()
    authn, authz = config.authentication, config.authorization
    assert authn.x509.client_ca_file == ""
    assert (authn.webhook.enabled, authn.webhook.cache_ttl) == (True, 120)
    assert authn.anonymous.enabled is False
    assert authz.mode == "Webhook"
    assert (authz.webhook.cache_authorized_ttl, authz.webhook.cache_unauthorized_ttl) == (300, 30)
    assert not {"authentication", "authorization"} & GO_ONLY_FIELDS


def test_authentication_and_authorization_take_the_go_names_and_durations():
    config = _decode({
        "authentication": {"x509": {"clientCAFile": "/etc/kubernetes/pki/ca.crt"},
                           "webhook": {"enabled": False, "cacheTTL": "10s"}, "anonymous": {"enabled": True}},
        "authorization": {"mode": "AlwaysAllow",
                          "webhook": {"cacheAuthorizedTTL": "1m", "cacheUnauthorizedTTL": "5s"}},
    })
    authn, authz = config.authentication, config.authorization
    assert (authn.x509.client_ca_file, authn.webhook.enabled, authn.webhook.cache_ttl, authn.anonymous.enabled) == (
        "/etc/kubernetes/pki/ca.crt", False, 10, True)
    assert (authz.mode, authz.webhook.cache_authorized_ttl, authz.webhook.cache_unauthorized_ttl) == ("AlwaysAllow", 60, 5)
    encoded = json.loads(encode_kubelet_configuration(config))
    assert encoded["authentication"]["webhook"] == {"enabled": False, "cacheTTL": "10s"}
    assert encoded["authorization"]["webhook"] == {"cacheAuthorizedTTL": "1m0s", "cacheUnauthorizedTTL": "5s"}
    with pytest.raises(msgspec.ValidationError, match=r"unknown field `clientCaFile` - at `\$.authentication.x509`"):
        _decode({"authentication": {"x509": {"clientCaFile": "/ca"}}})
    with pytest.raises(msgspec.ValidationError, match=r"invalid duration .* at `\$.authorization.webhook.cacheAuthorizedTTL`"):
        _decode({"authorization": {"webhook": {"cacheAuthorizedTTL": "5x"}}})


def test_zero_auth_durations_and_an_empty_mode_take_the_defaults_as_in_go():
    config = set_defaults(_decode({
        "authentication": {"webhook": {"cacheTTL": "0s", "enabled": False}, "anonymous": {"enabled": False}},
        "authorization": {"mode": "", "webhook": {"cacheAuthorizedTTL": "0s", "cacheUnauthorizedTTL": "0s"}},
    }), {"authentication", "authorization"})
    assert (config.authentication.webhook.cache_ttl, config.authentication.webhook.enabled) == (120, False)
    assert (config.authorization.mode, config.authorization.webhook.cache_authorized_ttl,
            config.authorization.webhook.cache_unauthorized_ttl) == ("Webhook", 300, 30)
    kept = set_defaults(_decode({"authorization": {"webhook": {"cacheAuthorizedTTL": "1s"}}}), {"authorization"})
    assert (kept.authorization.webhook.cache_authorized_ttl, kept.authorization.webhook.cache_unauthorized_ttl) == (1, 30)


def test_an_explicit_node_status_update_frequency_is_the_report_frequency_too():
    config = KubeletConfiguration(node_status_update_frequency=Duration(20))
    assert set_defaults(config, {"nodeStatusUpdateFrequency"}).node_status_report_frequency == 20
    assert set_defaults(config, set()).node_status_report_frequency == 300
    both = msgspec.structs.replace(config, node_status_report_frequency=Duration(60))
    given = {"nodeStatusUpdateFrequency", "nodeStatusReportFrequency"}
    assert set_defaults(both, given).node_status_report_frequency == 60


def test_parallel_image_pulls_turn_serial_pulls_off_unless_set():
    config = KubeletConfiguration(max_parallel_image_pulls=3)
    assert set_defaults(config, {"maxParallelImagePulls"}).serialize_image_pulls is False
    given = {"maxParallelImagePulls", "serializeImagePulls"}
    assert set_defaults(config, given).serialize_image_pulls is True


@pytest.mark.parametrize(
    "changes, field, problem",
    [
        (dict(port=0), "port", "must be between 1 and 65535"),
        (dict(port=65536), "port", "port 65536 is out of range"),
        (dict(healthz_port=-1), "healthzPort", "or 0 to disable it"),
        (dict(read_only_port=70000), "readOnlyPort", "or 0 to disable it"),
        (dict(address="localhost"), "address", '"localhost" is not an IP address'),
        (dict(healthz_bind_address="::x"), "healthzBindAddress", "not an IP address"),
        (dict(sync_frequency=Duration(0)), "syncFrequency", "longer than 0s"),
        (dict(runtime_request_timeout=Duration(-1)), "runtimeRequestTimeout", "longer than 0s"),
        (dict(max_pods=-1), "maxPods", "must not be negative"),
        (dict(node_lease_duration_seconds=0), "nodeLeaseDurationSeconds", "greater than 0"),
        (dict(image_gc_low_threshold_percent=90), "imageGCLowThresholdPercent", "less than imageGCHigh"),
        (dict(image_gc_high_threshold_percent=101), "imageGCHighThresholdPercent", "between 0 and 100"),
        (dict(max_parallel_image_pulls=0, serialize_image_pulls=False), "maxParallelImagePulls", "1 or more"),
        (dict(max_parallel_image_pulls=2), "maxParallelImagePulls", "serializeImagePulls"),
        (dict(logging=LoggingConfiguration(format="xml")), "logging.format", "use text or json"),
        (dict(container_runtime_endpoint="tcp://127.0.0.1:1"), "containerRuntimeEndpoint", "unix:///"),
        (dict(container_runtime_endpoint="unix://"), "containerRuntimeEndpoint", "unix:///"),
        (dict(container_log_max_size="10MB"), "containerLogMaxSize", '"10MB" is not a quantity: give'),
        (dict(container_log_max_size="1.5"), "containerLogMaxSize", "not a whole number of bytes"),
        (dict(container_log_max_files=1), "containerLogMaxFiles", "1 must be 2 or more"),
        (dict(container_log_max_workers=0), "containerLogMaxWorkers", "0 must be 1 or more"),
        (dict(container_log_monitor_interval=Duration(2.5)), "containerLogMonitorInterval",
         "2.5s is too short: must be 3s or longer"),
    ],
)
def test_validation_names_the_field_and_the_problem(changes, field, problem):
    problems = validate_kubelet_configuration(KubeletConfiguration(**changes))
    assert [name for name, _ in problems] == [field]
    assert problem in problems[0][1]


@pytest.mark.parametrize("changes", [dict(healthz_port=0), dict(read_only_port=10255), dict(address="::"),
                                     dict(container_runtime_endpoint="embedded"),
                                     dict(container_log_max_size="-1"), dict(container_log_max_files=2),
                                     dict(container_log_monitor_interval=Duration(3))])  # fmt: skip
def test_validation_accepts_what_go_accepts(changes):
    assert validate_kubelet_configuration(KubeletConfiguration(**changes)) == []


def test_container_log_fields_decode_from_the_go_names():
    config = _decode({"containerLogMaxSize": "2Ki", "containerLogMaxFiles": 3,
                      "containerLogMonitorInterval": "1m", "containerLogMaxWorkers": 4})  # fmt: skip
    assert (config.container_log_max_size, config.container_log_max_files) == ("2Ki", 3)
    assert (config.container_log_monitor_interval, config.container_log_max_workers) == (60, 4)
    with pytest.raises(msgspec.ValidationError, match=r"Expected `str`, got `int` - at `\$.containerLogMaxSize`"):
        _decode({"containerLogMaxSize": 10})
    encoded = json.loads(encode_kubelet_configuration(config))
    assert encoded["containerLogMonitorInterval"] == "1m0s" and encoded["containerLogMaxSize"] == "2Ki"


@pytest.mark.parametrize(
    "text, size",
    [("10Mi", 10 * 2**20), ("2Ki", 2048), ("1.5Ki", 1536), (".5Ki", 512), ("100M", 10**8), ("1k", 1000),
     ("1e3", 1000), ("1E3", 1000), ("5", 5), ("+7", 7), ("0", 0), ("-1", -1), ("1E", 10**18), ("7Ei", 7 * 2**60)],
)  # fmt: skip
def test_a_byte_quantity_is_read_as_go_reads_containerLogMaxSize(text, size):
    assert parse_byte_quantity(text) == size


@pytest.mark.parametrize(
    "text, problem",
    [("10MB", "is not a quantity"), ("10 Mi", "is not a quantity"), ("", "is not a quantity"),
     ("10mi", "is not a quantity"), ("Mi", "is not a quantity"), ("1.5", "not a whole number"),
     ("100m", "not a whole number"), ("8Ei", "fits in 64 bits"), ("1e400", "fits in 64 bits")],
)  # fmt: skip
def test_a_bad_byte_quantity_is_refused_with_an_example(text, problem):
    with pytest.raises(ValueError) as caught:
        parse_byte_quantity(text)
    assert problem in str(caught.value) and '"10Mi"' in str(caught.value)
