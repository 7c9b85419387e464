"""`pykubelet run` configuration: defaults < --config file < flags given; errors that say
where and how to fix; the root directory; the logging fields (their effect: test_logs.py)."""

from __future__ import annotations

import io
import textwrap

import pytest

from pykubelet.cli.config import (
    ConfigurationError,
    build_configuration,
    build_parser,
    exit_on_configuration_error,
    load_configuration,
    prepare_root_dir,
    read_config_file,
)
from pykubelet.pods.kubelet_auth import standalone_auth
from pykubelet.messages.config import KubeletConfiguration, KubeletFlags

HEADER = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"


@pytest.fixture
def config_file(tmp_path):
    """write(body) -> path of a KubeletConfiguration file with the header and `body`."""

    def write(body: str, header: str = HEADER, name: str = "config.yaml") -> str:
        path = tmp_path / name
        path.write_text(header + textwrap.dedent(body))
        return str(path)

    return write


def test_no_flags_give_the_defaults():
    flags, config = load_configuration([])
    assert flags == KubeletFlags()
    # Standalone (no --kubeconfig): Go's command-line defaults for the kubelet API's
    # authentication and authorization, the v1beta1 defaults for everything else.
    assert config == standalone_auth(KubeletConfiguration())
    assert config.authorization.mode == "AlwaysAllow" and config.authentication.anonymous.enabled


def test_cluster_mode_keeps_the_v1beta1_auth_defaults(tmp_path):
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("")
    _, config = load_configuration([f"--kubeconfig={kubeconfig}"])
    assert config.authorization.mode == "Webhook" and config.authentication.webhook.enabled
    assert not config.authentication.anonymous.enabled


def test_auth_flags_set_the_nested_fields():
    _, config = load_configuration(["--authorization-mode=AlwaysAllow", "--anonymous-auth=false",
                                    "--client-ca-file=/etc/kubernetes/ca.crt"])
    assert config.authorization.mode == "AlwaysAllow" and not config.authentication.anonymous.enabled
    assert config.authentication.x509.client_ca_file == "/etc/kubernetes/ca.crt"


def test_file_values_are_used(config_file):
    path = config_file("""
        healthzPort: 11248
        syncFrequency: 1m30s
        runtimeRequestTimeout: 500ms
        staticPodURL: http://127.0.0.1:8080/pods
        staticPodURLHeader: {Authorization: [Bearer x]}
        registerNode: false
        logging: {format: json, verbosity: 3}
    """)
    flags, config = load_configuration(["--config", path])
    assert flags.config == path
    assert config.healthz_port == 11248
    assert config.sync_frequency == 90
    assert config.runtime_request_timeout == 0.5
    assert config.static_pod_url == "http://127.0.0.1:8080/pods"
    assert config.static_pod_url_header == {"Authorization": ["Bearer x"]}
    assert config.register_node is False
    assert (config.logging.format, config.logging.verbosity) == ("json", 3)
    assert config.port == 10250  # not in the file: the default


@pytest.mark.parametrize(
    "argv, field, expected",
    [
        (["--healthz-port", "9999"], "healthz_port", 9999),
        (["--healthz-port=9999"], "healthz_port", 9999),
        (["--healthz_port=9999"], "healthz_port", 9999),  # pflag reads _ as -
        (["--sync-frequency=10s"], "sync_frequency", 10),
        (["--register-node=true"], "register_node", True),
        (["--register-node"], "register_node", True),
        (["--logging-format", "text"], "logging.format", "text"),
        (["--v=5"], "logging.verbosity", 5),
        (["-v", "5"], "logging.verbosity", 5),
        (["-v=5"], "logging.verbosity", 5),
        (["--healthz-port=0"], "healthz_port", 0),  # 0 disables healthz, as in Go
        (["--read-only-port=10255"], "read_only_port", 10255),
        (["--pod-manifest-path", "/etc/manifests"], "static_pod_path", "/etc/manifests"),
        (["--manifest-url-header=X-A:1"], "static_pod_url_header", {"X-A": ["1"]}),
    ],
)
def test_a_flag_given_beats_the_file(config_file, argv, field, expected):
    path = config_file("""
        healthzPort: 11248
        syncFrequency: 1m30s
        registerNode: false
        readOnlyPort: 0
        staticPodPath: /srv/manifests
        staticPodURLHeader: {X-B: ["2"]}
        logging: {format: json, verbosity: 3}
    """)
    _, config = load_configuration(["--config", path, *argv])
    value = config
    for part in field.split("."):
        value = getattr(value, part)
    assert value == expected


def test_a_flag_left_at_its_default_does_not_beat_the_file(config_file):
    path = config_file("""
        healthzPort: 11248
        maxPods: 20
        containerRuntimeEndpoint: unix:///run/other.sock
        logging: {format: json, verbosity: 3}
    """)
    loaded = build_configuration(["--config", path, "--port=10251"])
    assert loaded.config.healthz_port == 11248
    assert loaded.config.max_pods == 20
    assert loaded.config.container_runtime_endpoint == "unix:///run/other.sock"
    assert (loaded.config.logging.format, loaded.config.logging.verbosity) == ("json", 3)
    assert loaded.config.port == 10251
    assert {"healthzPort", "maxPods", "containerRuntimeEndpoint", "port"} <= loaded.explicit


def test_the_config_flag_may_come_after_the_flags_it_loses_to(config_file):
    path = config_file("healthzPort: 11248\n")
    _, config = load_configuration(["--healthz-port=9999", "--config", path])
    assert config.healthz_port == 9999


def test_explicit_tells_a_defaulted_runtime_endpoint_from_a_chosen_one(config_file):
    assert "containerRuntimeEndpoint" not in build_configuration([]).explicit
    chosen = build_configuration(["--container-runtime-endpoint=embedded"])
    assert "containerRuntimeEndpoint" in chosen.explicit
    path = config_file("containerRuntimeEndpoint: unix:///run/containerd/containerd.sock\n")
    assert "containerRuntimeEndpoint" in build_configuration(["--config", path]).explicit


def test_embedded_is_accepted_as_a_runtime_endpoint():
    _, config = load_configuration(["--container-runtime-endpoint", "embedded"])
    assert config.container_runtime_endpoint == "embedded"


def test_a_bare_socket_path_is_taken_with_a_warning_as_go_does():
    loaded = build_configuration(["--container-runtime-endpoint=/run/containerd/containerd.sock"])
    assert loaded.config.container_runtime_endpoint == "unix:///run/containerd/containerd.sock"
    assert any("deprecated" in warning for warning in loaded.warnings)


def test_flag_only_options_land_in_kubelet_flags():
    flags, _ = load_configuration([
        "--kubeconfig=/etc/kubernetes/kubelet.conf", "--root-dir", "/tmp/pk", "--hostname-override=node-a",
        "--node-ip=10.0.0.5,fd00::5", "--node-labels=a=b,c", "--node-labels", "node.kubernetes.io/pool=x",
        "--enable-fault-injection",
    ])  # fmt: skip
    assert flags == KubeletFlags(
        kubeconfig="/etc/kubernetes/kubelet.conf",
        root_dir="/tmp/pk",
        hostname_override="node-a",
        node_ip=("10.0.0.5", "fd00::5"),
        node_labels={"a": "b", "c": "", "node.kubernetes.io/pool": "x"},
        enable_fault_injection=True,
    )


def test_an_empty_kubeconfig_means_standalone():
    flags, _ = load_configuration(["--kubeconfig="])
    assert flags.kubeconfig is None


def test_manifest_url_headers_accumulate_and_replace_the_files(config_file):
    path = config_file("staticPodURLHeader: {X-B: ['2']}\n")
    argv = ["--config", path, "--manifest-url-header", "a:1,b:2", "--manifest-url-header=a:3"]
    _, config = load_configuration(argv)
    assert config.static_pod_url_header == {"a": ["1", "3"], "b": ["2"]}


def test_relative_paths_in_the_file_are_relative_to_the_file(config_file, tmp_path):
    path = config_file("staticPodPath: manifests\n")
    _, config = load_configuration(["--config", path])
    assert config.static_pod_path == str(tmp_path / "manifests")


def test_zero_in_the_file_means_the_default_where_go_says_so(config_file):
    path = config_file("port: 0\nsyncFrequency: 0s\nmaxPods: 0\nhealthzPort: 0\n")
    _, config = load_configuration(["--config", path])
    assert (config.port, config.sync_frequency, config.max_pods) == (10250, 60, 110)
    assert config.healthz_port == 0  # a pointer in Go: 0 stays, and disables healthz


def test_go_kubelet_fields_pykubelet_lacks_are_ignored_with_a_warning(config_file):
    path = config_file("""
        cpuManagerPolicy: static
        memorySwap: {swapBehavior: LimitedSwap}
        clusterDomain: cluster.local
    """)
    loaded = build_configuration(["--config", path])
    assert loaded.config.cluster_domain == "cluster.local"
    assert loaded.warnings == (
        f"--config {path}: ignoring fields of the Go kubelet that pykubelet does not implement: "
        "cpuManagerPolicy, memorySwap",
    )


def test_eviction_hard_replaces_the_defaults_unless_merged(config_file):
    replaced = build_configuration(["--config", config_file("evictionHard: {memory.available: 200Mi}\n")])
    assert replaced.config.eviction_hard == {"memory.available": "200Mi"}
    merged = build_configuration(["--config", config_file(
        "evictionHard: {memory.available: 200Mi}\nmergeDefaultEvictionSettings: true\n")])
    assert merged.config.eviction_hard == {"memory.available": "200Mi", "nodefs.available": "10%",
                                           "nodefs.inodesFree": "5%", "imagefs.available": "15%",
                                           "imagefs.inodesFree": "5%"}
    assert build_configuration([]).config.eviction_hard == merged.config.eviction_hard | {"memory.available": "100Mi"}


@pytest.mark.parametrize("lines, field, words", [
    ("cgroupDriver: systemd\n", "cgroupDriver", "set cgroupDriver: cgroupfs"),
    ("evictionHard: {memory.available: lots}\n", 'evictionHard["memory.available"]', "not a quantity"),
    ("evictionSoft: {memory.available: 1Gi}\n", "evictionSoft", "grace period"),
    ("kubeReserved: {gpu: '1'}\n", "kubeReserved", 'cannot reserve "gpu"'),
    ("enforceNodeAllocatable: [pods, kube-reserved]\n", "enforceNodeAllocatable", "kubeReservedCgroup"),
    ("cpuCFSQuotaPeriod: 2s\n", "cpuCFSQuotaPeriod", "between 1ms and 1s"),
])  # fmt: skip
def test_resource_and_eviction_settings_pykubelet_cannot_apply_are_refused(config_file, lines, field, words):
    with pytest.raises(ConfigurationError) as refused:
        build_configuration(["--config", config_file(lines)])
    assert field in str(refused.value) and words in str(refused.value)


def test_logging_flush_frequency_takes_nanoseconds_as_go_does(config_file):
    path = config_file("logging: {flushFrequency: 2000000000}\n")
    assert read_config_file(path).config.logging.flush_frequency == 2


FILE_ERRORS = [
    ("healthzPort: abc\n", 'field "healthzPort": expected int, got str "abc"; fix the value in the file'),
    ("healthzPort: '10248'\n", 'field "healthzPort": expected int, got str "10248"'),
    ("helthzPort: 1\n", 'unknown field "helthzPort" (did you mean "healthzPort"?); fix or remove it'),
    ("HealthzPort: 1\n", 'did you mean "healthzPort"? names are case-sensitive'),
    ("logging: {formt: json}\n", 'unknown field "logging.formt" (did you mean "logging.format"?)'),
    ("syncFrequency: 5x\n", 'field "syncFrequency": invalid duration "5x": unknown unit "x"'),
    ("syncFrequency: 60\n", 'field "syncFrequency": expected a Go duration such as "1m30s"'),
    ("syncFrequency: -1s\n", 'field "syncFrequency": -1s is too short'),
    ("clusterDNS: [10.0.0.10, 5]\n", 'field "clusterDNS[1]": expected str, got int 5'),
    ("port: 70000\n",
     'field "port": port 70000 is out of range: must be between 1 and 65535; fix the value in the file'),
    ("healthzPort: 70000\n",
     'field "healthzPort": port 70000 is out of range: must be between 1 and 65535, or 0 to disable it'),
    ("readOnlyPort: -1\n", 'field "readOnlyPort": port -1 is out of range'),
    ("logging: {format: xml}\n", 'field "logging.format": "xml" is not a logging format: use text or json'),
    ("address: localhost\n", 'field "address": "localhost" is not an IP address'),
    ("containerRuntimeEndpoint: tcp://127.0.0.1:9\n",
     'field "containerRuntimeEndpoint": "tcp://127.0.0.1:9" is not a runtime endpoint'),
    ("port: 1\nport: 2\n", 'field "port" is set twice (lines 3 and 4); keep one'),
    ("port: [1\n", "not valid YAML at line 4, column 1"),
    ("port: 1\n  x: 2\n", "not valid YAML at line 4, column 4: mapping values are not allowed"),
]


@pytest.mark.parametrize("body, message", FILE_ERRORS)
def test_a_bad_file_is_refused_naming_the_file_the_field_and_the_fix(config_file, body, message):
    path = config_file(body)
    with pytest.raises(ConfigurationError) as caught:
        load_configuration(["--config", path])
    assert str(caught.value).startswith(f"--config {path}: ")
    assert message in str(caught.value)


@pytest.mark.parametrize(
    "header, message",
    [
        ("kind: KubeletConfiguration\n",
         'field "apiVersion" is missing; add apiVersion: kubelet.config.k8s.io/v1beta1'),
        ("apiVersion: kubelet.config.k8s.io/v1beta1\n",
         'field "kind" is missing; add kind: KubeletConfiguration'),
        ("apiVersion: kubelet.config.k8s.io/v1alpha1\nkind: KubeletConfiguration\n",
         'field "apiVersion": "kubelet.config.k8s.io/v1alpha1" is not supported; '
         "set apiVersion: kubelet.config.k8s.io/v1beta1"),
        ("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeProxyConfiguration\n",
         'field "kind": "KubeProxyConfiguration" is not supported; set kind: KubeletConfiguration'),
        ("", 'field "apiVersion" is missing'),
        ("- a\n", "expected a mapping, got a list"),
    ],
)  # fmt: skip
def test_the_file_must_be_a_v1beta1_kubelet_configuration(config_file, header, message):
    path = config_file("", header=header)
    with pytest.raises(ConfigurationError, match="^--config ") as caught:
        load_configuration(["--config", path])
    assert message in str(caught.value)


def test_a_missing_file_is_named(tmp_path):
    path = tmp_path / "nope.yaml"
    with pytest.raises(ConfigurationError) as caught:
        load_configuration(["--config", str(path)])
    assert str(caught.value) == f"--config {path}: file not found; create it or fix the path"


def test_a_directory_is_not_a_config_file(tmp_path):
    with pytest.raises(ConfigurationError, match="is a directory"):
        load_configuration(["--config", str(tmp_path)])


def test_every_validation_problem_is_reported_at_once(config_file):
    path = config_file("port: 70000\nlogging: {format: xml}\n")
    with pytest.raises(ConfigurationError) as caught:
        load_configuration(["--config", path, "--healthz-port=-2"])
    lines = str(caught.value).splitlines()
    assert len(lines) == 3
    assert lines[0].startswith(f'--config {path}: field "port"')
    assert lines[1].startswith("--healthz-port=-2: port -2 is out of range")
    assert lines[1].endswith("fix the value of --healthz-port")
    assert lines[2].startswith(f'--config {path}: field "logging.format"')


FLAG_ERRORS = [
    (["--healthz-port", "abc"], "--healthz-port=abc: not an integer; fix the value of --healthz-port"),
    (["--port=99999999999"], "--port=99999999999: out of range"),
    (["--port=0"], "--port=0: port 0 is out of range: must be between 1 and 65535; fix the value of --port"),
    (["--read-only-port=70000"], "or 0 to disable it"),
    (["--sync-frequency=1d"], '--sync-frequency=1d: invalid duration "1d": unknown unit "d"'),
    (["--runtime-request-timeout=10"], "missing unit"),
    (["--register-node=maybe"], "--register-node=maybe: not a boolean: use true or false"),
    (["--register-node", "false"],
     'unexpected argument "false" after --register-node: a boolean flag takes its value after \'=\': '
     "--register-node=false"),
    (["--helthz-port=3"], "unknown flag --helthz-port; did you mean --healthz-port?"),
    (["--kube-reserved=cpu=1"], "unknown flag --kube-reserved"),
    (["--healthz"], "unknown flag --healthz"),  # no abbreviations, as in Go
    (["run"], 'unexpected argument "run": pykubelet run takes only flags'),
    (["--port"], "--port: expected one argument"),
    (["--logging-format=xml"], '--logging-format=xml: "xml" is not a logging format: use text or json'),
    (["--v=-1"], "--v=-1: out of range"),
    (["--address=my-host"], "--address=my-host: not an IP address"),
    (["--healthz-bind-address=localhost"], "not an IP address"),
    (["--node-ip=10.0.0.1,10.0.0.2"], "one IPv4 and one IPv6"),
    (["--node-ip=node-a"], "not an IP address"),
    (["--node-labels=node-role.kubernetes.io/master="],
     'label "node-role.kubernetes.io/master": in the kubernetes.io and k8s.io namespaces'),
    (["--node-labels=-bad=x"], 'label key "-bad"'),
    (["--node-labels=a=not ok"], "label a=not ok: the value"),
    (["--manifest-url-header=nocolon"], 'malformed header "nocolon": expected name:value'),
    (["--container-runtime-endpoint=tcp://127.0.0.1:9"], "is not a runtime endpoint pykubelet can use"),
]


@pytest.mark.parametrize("argv, message", FLAG_ERRORS)
def test_a_bad_flag_is_refused_naming_the_flag_and_the_fix(argv, message):
    with pytest.raises(ConfigurationError) as caught:
        load_configuration(argv)
    assert message in str(caught.value)


@pytest.mark.parametrize("label", ["kubernetes.io/hostname", "node.kubernetes.io/instance-type",
                                   "kubelet.kubernetes.io/x", "a.node.kubernetes.io/y", "example.com/z"])  # fmt: skip
def test_node_labels_a_kubelet_may_set_are_accepted(label):
    flags, _ = load_configuration([f"--node-labels={label}=v"])
    assert flags.node_labels == {label: "v"}


def test_help_lists_the_go_flag_names():
    text = build_parser().format_help()
    for flag in ("--config", "--kubeconfig", "--root-dir", "--container-runtime-endpoint",
                 "--healthz-port", "--logging-format", "--v", "--manifest-url-header",
                 "--node-status-update-frequency"):  # fmt: skip
        assert flag in text


def test_exit_on_configuration_error_prints_one_line_and_exits_2():
    stream = io.StringIO()
    with pytest.raises(SystemExit) as caught:
        exit_on_configuration_error(ConfigurationError("--port=0: bad; fix it"), stream=stream)
    assert caught.value.code == 2
    assert stream.getvalue() == "pykubelet: --port=0: bad; fix it\n"


# --- the root directory --------------------------------------------------------------------


def test_prepare_root_dir_makes_the_whole_path(tmp_path):
    root = tmp_path / "a" / "b" / "pykubelet"
    assert prepare_root_dir(str(root)) == root
    assert root.is_dir()
    assert prepare_root_dir(str(root)) == root  # already there: fine


def test_prepare_root_dir_names_the_path_the_os_error_and_the_fix():
    with pytest.raises(ConfigurationError) as caught:
        prepare_root_dir("/proc/pykubelet-test")
    message = str(caught.value)
    assert message.startswith("--root-dir /proc/pykubelet-test: cannot create: [Errno ")
    assert message.endswith("; choose a writable directory")


def test_prepare_root_dir_refuses_a_file(tmp_path):
    (tmp_path / "file").write_text("")
    with pytest.raises(ConfigurationError, match="exists and is not a directory"):
        prepare_root_dir(str(tmp_path / "file"))
    with pytest.raises(ConfigurationError, match="cannot create"):
        prepare_root_dir(str(tmp_path / "file" / "below"))


# --- logging -------------------------------------------------------------------------------


def test_logging_settings_pykubelet_does_not_apply_are_named_at_start(config_file):
    path = config_file("logging: {flushFrequency: 1s, vmodule: [{filePattern: pleg, verbosity: 4}], "
                       "options: {json: {infoBufferSize: '0'}}}\n")
    warnings = build_configuration(["--config", path]).warnings
    assert [w.split(" ", 1)[0] for w in warnings] == ["logging.flushFrequency", "logging.options"]
    assert build_configuration([]).warnings == ()
