"""The effective configuration of `pykubelet run`: defaults < --config file < flags given.

load_configuration(argv) parses the Go kubelet's flag names, reads and strictly decodes the
KubeletConfiguration file, lays the flags given on the command line over it (as the Go
kubelet's kubeletConfigFlagPrecedence does) and validates the result. Every failure is a
ConfigurationError naming the input (the flag or the file and field) and the fix; the daemon's
main prints it and exits 2 (exit_on_configuration_error).
"""

from __future__ import annotations

import argparse
import difflib
import ipaddress
import json
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, NamedTuple, NoReturn, Sequence, TextIO

import msgspec
import yaml

from pykubelet.messages import strict_yaml
from pykubelet.messages.config import (
    API_VERSION,
    DEFAULT_RUNTIME_ENDPOINT,
    GO_ONLY_FIELDS,
    KIND,
    KubeletConfiguration,
    KubeletFlags,
    LoggingConfiguration,
    VModuleItem,
    go_field_names,
    set_defaults,
)
from pykubelet.messages.config_validation import validate_kubelet_configuration
from pykubelet.messages.duration import DurationError, dec_hook, parse_duration
from pykubelet.pods.kubelet_auth import standalone_auth, validate_auth

from .logs import parse_vmodule

EXIT_CONFIGURATION_ERROR = 2


class ConfigurationError(Exception):
    """The command line or the --config file is wrong; str(error) says where and how to fix it."""


def exit_on_configuration_error(error: ConfigurationError, stream: TextIO | None = None) -> NoReturn:
    """What the daemon's main does with a ConfigurationError: one line on stderr, exit 2."""
    print(f"pykubelet: {error}", file=stream or sys.stderr)
    raise SystemExit(EXIT_CONFIGURATION_ERROR)


class LoadedConfiguration(msgspec.Struct, frozen=True):
    flags: KubeletFlags
    config: KubeletConfiguration
    # Things to log once logging is set up (ignored Go-only fields, deprecated forms).
    warnings: tuple[str, ...] = ()
    # Go names of the configuration fields set by the file or a flag rather than defaulted
    # ("containerRuntimeEndpoint", "logging.format", ...): the daemon picks the embedded
    # runtime only when the runtime endpoint was left at its default.
    explicit: frozenset[str] = frozenset()


def load_configuration(argv: Sequence[str]) -> tuple[KubeletFlags, KubeletConfiguration]:
    """The flags and configuration for `pykubelet run ARGV` (ARGV: the words after "run")."""
    loaded = build_configuration(argv)
    return loaded.flags, loaded.config


# --- flags -------------------------------------------------------------------------------


def _quote(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False) if isinstance(value, str) else repr(value)


def _parse_string(raw: str) -> str:
    return raw


def _parse_optional(raw: str) -> str | None:
    return raw or None  # Go: an empty string is the same as not given


def _parse_int(raw: str, low: int, high: int) -> int:
    try:
        value = int(raw, 10)
    except ValueError:
        raise ValueError("not an integer") from None
    if not low <= value <= high:
        raise ValueError(f"out of range: must be between {low} and {high}")
    return value


def _parse_int32(raw: str) -> int:
    return _parse_int(raw, -(2**31), 2**31 - 1)


def _parse_verbosity(raw: str) -> int:
    return _parse_int(raw, 0, 2**31 - 1)


def _parse_vmodule(raw: str) -> list[VModuleItem]:
    return [VModuleItem(file_pattern=pattern, verbosity=level) for pattern, level in parse_vmodule(raw)]


_TRUE = {"1", "t", "T", "TRUE", "true", "True"}
_FALSE = {"0", "f", "F", "FALSE", "false", "False"}


def _parse_bool(raw: str) -> bool:
    if raw in _TRUE:
        return True
    if raw in _FALSE:
        return False
    raise ValueError("not a boolean: use true or false")  # Go strconv.ParseBool's set


def _parse_duration(raw: str) -> float:
    try:
        return parse_duration(raw)
    except DurationError as error:
        raise ValueError(str(error)) from None


def _parse_ip(raw: str) -> str:
    try:
        ipaddress.ip_address(raw)
    except ValueError:
        raise ValueError("not an IP address (e.g. 0.0.0.0, 127.0.0.1 or ::)") from None
    return raw


def _parse_node_ips(raw: str) -> tuple[str, ...]:
    if not raw:
        return ()
    ips = [part.strip() for part in raw.split(",")]
    try:
        parsed = [ipaddress.ip_address(ip) for ip in ips]
    except ValueError:
        raise ValueError("not an IP address, or two comma-separated (one IPv4, one IPv6)") from None
    if len(parsed) > 2 or (len(parsed) == 2 and parsed[0].version == parsed[1].version):
        raise ValueError("dual-stack --node-ip takes exactly one IPv4 and one IPv6 address")
    return tuple(ips)


def _parse_node_labels(raws: list[str]) -> dict[str, str]:
    # cliflag.ConfigurationMap: "k=v,k2=v2", repeatable, accumulates; "k" alone is k="".
    labels: dict[str, str] = {}
    for raw in raws:
        for pair in raw.split(","):
            if pair:
                key, _, value = pair.partition("=")
                labels[key.strip()] = value.strip()
    for key, value in labels.items():
        problem = _label_problem(key, value)
        if problem:
            raise ValueError(problem)
    return labels


def _parse_url_headers(raws: list[str]) -> dict[str, list[str]]:
    # cliflag.ColonSeparatedMultimapStringString: "a:x,b:y", repeatable, values accumulate per
    # name in order; the flag replaces the file's map rather than merging with it.
    headers: dict[str, list[str]] = {}
    for raw in raws:
        for pair in raw.split(","):
            if not pair:
                continue
            name, colon, value = pair.partition(":")
            if not colon or not name.strip():
                raise ValueError(f"malformed header {_quote(pair)}: expected name:value")
            headers.setdefault(name.strip(), []).append(value.strip())
    return headers


@dataclass(frozen=True)
class _Flag:
    name: str
    target: str  # "flags.<attr>" or "config.<Go field name>" ("config.logging.format")
    parse: Callable[[Any], Any]
    metavar: str
    help: str
    boolean: bool = False
    repeated: bool = False


_FLAGS = (
    # KubeletFlags: options the Go kubelet has only as flags (and ours).
    _Flag("config", "flags.config", _parse_optional, "FILE",
          "KubeletConfiguration (kubelet.config.k8s.io/v1beta1) YAML; flags given here win over it"),
    _Flag("kubeconfig", "flags.kubeconfig", _parse_optional, "FILE",
          "kubeconfig of the API server; absent: standalone mode"),
    _Flag("root-dir", "flags.root_dir", _parse_string, "DIR",
          "directory for the kubelet's own files (default /var/lib/pykubelet)"),
    _Flag("hostname-override", "flags.hostname_override", _parse_optional, "NAME",
          "node name to use instead of the host name"),
    _Flag("node-ip", "flags.node_ip", _parse_node_ips, "IP[,IP]",
          "IP address of the node; for dual-stack one IPv4 and one IPv6, comma-separated"),
    _Flag("node-labels", "flags.node_labels", _parse_node_labels, "K=V,...",
          "labels to add when registering the node; repeatable", repeated=True),
    _Flag("cert-dir", "flags.cert_dir", _parse_string, "DIR",
          "where the self-signed serving certificate is kept (default <root-dir>/pki)"),
    _Flag("enable-fault-injection", "flags.enable_fault_injection", _parse_bool, "BOOL",
          "allow POST /debug/actors/{path}/crash on the admin socket (default false)", boolean=True),
    _Flag("runonce", "flags.run_once", _parse_bool, "BOOL",
          "run the static pods of --pod-manifest-path/--manifest-url once, wait for them and exit "
          "(0: every pod running or succeeded); not with --kubeconfig", boolean=True),
    # KubeletConfiguration fields, by Go name.
    _Flag("container-runtime-endpoint", "config.containerRuntimeEndpoint", _parse_string, "ENDPOINT",
          f"CRI socket (unix://...) or 'embedded' (default {DEFAULT_RUNTIME_ENDPOINT})"),
    _Flag("runtime-request-timeout", "config.runtimeRequestTimeout", _parse_duration, "DURATION",
          "timeout of runtime requests except pull, logs, exec and attach (default 2m0s)"),
    _Flag("pod-manifest-path", "config.staticPodPath", _parse_string, "PATH",
          "directory of static pod manifests, or one manifest file"),
    _Flag("manifest-url", "config.staticPodURL", _parse_string, "URL",
          "URL of static pod manifests"),
    _Flag("manifest-url-header", "config.staticPodURLHeader", _parse_url_headers, "NAME:VALUE,...",
          "HTTP headers for --manifest-url; repeatable", repeated=True),
    _Flag("register-node", "config.registerNode", _parse_bool, "BOOL",
          "register the node with the API server (default true)", boolean=True),
    _Flag("address", "config.address", _parse_ip, "IP",
          "IP address of the kubelet API server (default 0.0.0.0)"),
    _Flag("port", "config.port", _parse_int32, "PORT",
          "port of the kubelet API server (default 10250)"),
    _Flag("read-only-port", "config.readOnlyPort", _parse_int32, "PORT",
          "port of the unauthenticated read-only API; 0 = off (default 0)"),
    _Flag("tls-cert-file", "config.tlsCertFile", _parse_string, "FILE",
          "serving certificate of the kubelet API (default: self-signed in --cert-dir)"),
    _Flag("tls-private-key-file", "config.tlsPrivateKeyFile", _parse_string, "FILE",
          "key of --tls-cert-file"),
    _Flag("client-ca-file", "config.authentication.x509.clientCAFile", _parse_string, "FILE",
          "CA that signs the client certificates the kubelet API accepts"),
    _Flag("anonymous-auth", "config.authentication.anonymous.enabled", _parse_bool, "BOOL",
          "serve requests without credentials as system:anonymous", boolean=True),
    _Flag("authentication-token-webhook", "config.authentication.webhook.enabled", _parse_bool, "BOOL",
          "authenticate bearer tokens with a TokenReview", boolean=True),
    _Flag("authorization-mode", "config.authorization.mode", _parse_string, "MODE",
          "AlwaysAllow or Webhook (SubjectAccessReview)"),
    _Flag("healthz-port", "config.healthzPort", _parse_int32, "PORT",
          "port of the healthz endpoint; 0 = off (default 10248)"),
    _Flag("healthz-bind-address", "config.healthzBindAddress", _parse_ip, "IP",
          "IP address of the healthz endpoint (default 127.0.0.1)"),
    _Flag("sync-frequency", "config.syncFrequency", _parse_duration, "DURATION",
          "max period between syncs of running pods (default 1m0s)"),
    _Flag("file-check-frequency", "config.fileCheckFrequency", _parse_duration, "DURATION",
          "period between reads of --pod-manifest-path (default 20s)"),
    _Flag("http-check-frequency", "config.httpCheckFrequency", _parse_duration, "DURATION",
          "period between fetches of --manifest-url (default 20s)"),
    _Flag("node-status-update-frequency", "config.nodeStatusUpdateFrequency", _parse_duration,
          "DURATION", "period between node status computations (default 10s)"),
    _Flag("cgroups-per-qos", "config.cgroupsPerQOS", _parse_bool, "BOOL",
          "a cgroup per QoS class and per pod under kubepods (default true)", boolean=True),
    _Flag("cgroup-driver", "config.cgroupDriver", _parse_string, "DRIVER",
          "cgroupfs (the systemd driver is not supported) (default cgroupfs)"),
    _Flag("cgroup-root", "config.cgroupRoot", _parse_string, "PATH",
          "cgroup under which kubepods is made (default /)"),
    _Flag("fail-cgroupv1", "config.failCgroupV1", _parse_bool, "BOOL",
          "refuse to start on a cgroup v1 host (default true, as the Go kubelet since 1.35)", boolean=True),
    _Flag("max-pods", "config.maxPods", _parse_int32, "N",
          "maximum number of pods on this node (default 110)"),
    _Flag("logging-format", "config.logging.format", _parse_string, "FORMAT",
          "text or json (default text)"),
    _Flag("v", "config.logging.verbosity", _parse_verbosity, "N",
          "log verbosity: V(N) lines and below are shown; 0 info only, 2 pod changes, 4 detail, "
          "6 API requests, 10 everything (default 0)"),
    _Flag("vmodule", "config.logging.vmodule", _parse_vmodule, "PATTERN=N,...",
          "verbosity per source file, as klog: PATTERN is a file's base name without .py, or a "
          "glob of it (pleg=4,sync_*=2); the first match wins; text format only"),
)  # fmt: skip
_FLAGS_BY_NAME = {flag.name: flag for flag in _FLAGS}
_BOOLEAN_FLAGS = {flag.name for flag in _FLAGS if flag.boolean}


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise ConfigurationError(f"{message}; see pykubelet run --help")


def build_parser() -> argparse.ArgumentParser:
    """The argparse parser of `pykubelet run` (it only splits words; values are parsed later)."""
    parser = _Parser(
        prog="pykubelet run",
        description="Run the kubelet. Flags given here win over the --config file.",
        allow_abbrev=False,
        argument_default=argparse.SUPPRESS,  # only flags actually given appear: precedence
    )
    for flag in _FLAGS:
        names = ["-v", "--v"] if flag.name == "v" else [f"--{flag.name}"]
        parser.add_argument(
            *names,
            dest=flag.name,
            metavar=flag.metavar,
            help=flag.help,
            action="append" if flag.repeated else "store",
        )
    return parser


def _normalize_argv(argv: Sequence[str]) -> list[str]:
    """Go pflag spellings into argparse ones: `--flag_name` is `--flag-name`, a bare boolean
    `--register-node` is `--register-node=true` (so, as in Go, `--register-node false` leaves
    "false" as a stray argument), `-v=4` is `-v 4`."""
    out: list[str] = []
    for index, word in enumerate(argv):
        if word == "--":
            out.extend(argv[index:])
            break
        if word.startswith("--") and len(word) > 2:
            name, equals, value = word[2:].partition("=")
            name = name.replace("_", "-")
            if name in _BOOLEAN_FLAGS and not equals:
                equals, value = "=", "true"
            word = f"--{name}{equals}{value}"
        elif word.startswith("-v="):
            word = f"--v={word[3:]}"
        out.append(word)
    return out


def _stray_argument_error(stray: str, argv: list[str]) -> ConfigurationError:
    if stray.startswith("-") and stray != "-":
        name = stray.lstrip("-").partition("=")[0]
        close = difflib.get_close_matches(name, list(_FLAGS_BY_NAME), n=1)
        hint = f"; did you mean --{close[0]}?" if close else "; see pykubelet run --help"
        return ConfigurationError(f"unknown flag {stray.partition('=')[0]}{hint}")
    position = argv.index(stray)
    before = argv[position - 1] if position else ""
    flag = before[2:].partition("=")[0] if before.startswith("--") else ""
    if flag in _BOOLEAN_FLAGS:
        return ConfigurationError(
            f"unexpected argument {_quote(stray)} after --{flag}: a boolean flag takes its value "
            f"after '=': --{flag}={stray}"
        )
    return ConfigurationError(f"unexpected argument {_quote(stray)}: pykubelet run takes only flags")


# --- the --config file -------------------------------------------------------------------


_CONFIG_FIELDS = go_field_names(KubeletConfiguration)  # Go name -> Python attribute
_LOGGING_FIELDS = go_field_names(LoggingConfiguration)
_KNOWN_FIELDS = {  # for "did you mean": by the path of the mapping the unknown name is in
    "": set(_CONFIG_FIELDS) | GO_ONLY_FIELDS,
    "logging": set(_LOGGING_FIELDS),
    "logging.vmodule": set(go_field_names(VModuleItem)),
}
# Paths in the file are relative to the file's directory (Go: KubeletConfigurationPathRefs).
_PATH_FIELDS = ("static_pod_path", "pod_logs_dir", "resolv_conf")
_YAML_KINDS = {dict: "a mapping", list: "a list", str: "a string", int: "a number", float: "a number"}
_MSGSPEC_ERROR = re.compile(r"^(?P<problem>.*?)(?: - at `(?P<path>[^`]*)`)?$", re.DOTALL)


class ConfigFile(NamedTuple):
    config: KubeletConfiguration  # decoded, defaulted as Go defaults it, not yet validated
    given: frozenset[str]  # the top-level Go field names the file sets
    warnings: list[str]


def read_config_file(path: str) -> ConfigFile:
    """Read and strictly decode one KubeletConfiguration file; ConfigurationError if it is wrong."""
    where = f"--config {path}"
    document = _read_yaml(path, where)
    for field, expected in (("apiVersion", API_VERSION), ("kind", KIND)):
        if field not in document:
            raise ConfigurationError(f'{where}: field "{field}" is missing; add {field}: {expected}')
        if document[field] != expected:
            raise ConfigurationError(f'{where}: field "{field}": {_quote(document[field])} is not '
                                     f"supported; set {field}: {expected}")  # fmt: skip
    warnings = []
    ignored = sorted(name for name in document if name in GO_ONLY_FIELDS and name != "runOnce")
    if "runOnce" in document:
        warnings.append(f"{where}: ignoring field runOnce: pass --runonce on the command line to run "
                        "the static pods once (the Go kubelet refuses the field since it removed --runonce)")  # fmt: skip
    if ignored:
        warnings.append(f"{where}: ignoring fields of the Go kubelet that pykubelet does not "
                        f"implement: {', '.join(ignored)}")  # fmt: skip
    document = {name: value for name, value in document.items() if name not in GO_ONLY_FIELDS}
    logging = document.get("logging")
    if isinstance(logging, dict) and type(logging.get("flushFrequency")) is int:
        # Go's TimeOrMetaDuration: an integer is nanoseconds.
        document["logging"] = {**logging, "flushFrequency": f"{logging['flushFrequency']}ns"}
    try:
        config = msgspec.convert(document, KubeletConfiguration, dec_hook=dec_hook)
    except msgspec.ValidationError as error:
        raise ConfigurationError(f"{where}: {_describe_decode_error(str(error), document)}") from None
    given = frozenset(document)
    config = set_defaults(config, given)
    base = Path(os.path.abspath(path)).parent
    relative = {name: str(base / getattr(config, name)) for name in _PATH_FIELDS
                if getattr(config, name) and not os.path.isabs(getattr(config, name))}  # fmt: skip
    config = msgspec.structs.replace(config, **relative)
    ca_file = config.authentication.x509.client_ca_file
    if ca_file and not os.path.isabs(ca_file):  # relative to the file, as Go resolves it
        config = _with_nested(config, ["authentication", "x509", "clientCAFile"], str(base / ca_file))
    return ConfigFile(config, given, warnings)


def _read_yaml(path: str, where: str) -> dict:
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        raise ConfigurationError(f"{where}: file not found; create it or fix the path") from None
    except IsADirectoryError:
        raise ConfigurationError(f"{where}: is a directory; give the path of a YAML file") from None
    except OSError as error:
        raise ConfigurationError(f"{where}: cannot read: {error}; fix the path or permissions") from None
    try:
        document = strict_yaml.load(data)
    except strict_yaml.DuplicateKey as error:
        raise ConfigurationError(f"{where}: field {_quote(error.key)} is set twice (lines {error.first_line} "
                                 f"and {error.line}); keep one") from None
    except RecursionError:
        raise ConfigurationError(f"{where}: not valid YAML: nested too deeply; fix the file") from None
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ConfigurationError(f"{where}: not valid YAML{at}: {error.problem}; fix the file") from None
    except yaml.YAMLError as error:
        raise ConfigurationError(f"{where}: not valid YAML: {error}; fix the file") from None
    if document is None:
        document = {}
    if not isinstance(document, dict):
        got = _YAML_KINDS.get(type(document), type(document).__name__)
        raise ConfigurationError(
            f"{where}: expected a mapping, got {got}; the file holds one KubeletConfiguration object"
        )
    return document


def _describe_decode_error(message: str, raw: dict) -> str:
    """msgspec's "Expected `int`, got `str` - at `$.healthzPort`" in an operator's words."""
    match = _MSGSPEC_ERROR.match(message)
    problem, path = match.group("problem"), match.group("path") or "$"
    unknown = re.match(r"Object contains unknown field `(.*)`", problem)
    parent = re.sub(r"\[\d+\]", "", path.removeprefix("$").lstrip("."))
    if unknown:
        name = unknown.group(1)
        field = f"{parent}.{name}" if parent else name
        known = _KNOWN_FIELDS.get(parent, set())
        return f'unknown field "{field}"{_suggest(name, known, parent)}; fix or remove it'
    if not path.startswith("$"):  # "Expected `str` - at `key` in `$`": a mapping key
        return f"{problem.replace('`', '')} (a key in {path.split('`')[-1] or 'the file'}); fix the file"
    field = path.removeprefix("$").lstrip(".") or "(top level)"
    problem = problem.replace("`", "").replace("object", "mapping").replace("array", "list")
    problem = problem[0].lower() + problem[1:]
    value = _value_at(raw, field)
    if re.search(r", got \w+$", problem) and value is not _MISSING:
        problem += f" {_quote(value)}"
    return f'field "{field}": {problem}; fix the value in the file'


def _suggest(name: str, known: set[str], parent: str) -> str:
    prefix = f"{parent}." if parent else ""
    by_case = {candidate.lower(): candidate for candidate in known}
    if name.lower() in by_case:
        return f' (did you mean "{prefix}{by_case[name.lower()]}"? names are case-sensitive)'
    close = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.6)
    return f' (did you mean "{prefix}{close[0]}"?)' if close else ""


_MISSING = object()


def _value_at(raw: Any, field: str) -> Any:
    value = raw
    for part in re.findall(r"[^.\[\]]+|\[\d+\]", field):
        if part.startswith("[") and isinstance(value, list) and int(part[1:-1]) < len(value):
            value = value[int(part[1:-1])]
        elif isinstance(value, dict) and part in value:
            value = value[part]
        else:
            return _MISSING
    return value if isinstance(value, (str, int, float)) else _MISSING


# --- putting it together -----------------------------------------------------------------


def _with_nested(struct: Any, path: list[str], value: Any) -> Any:
    """`struct` with the field at the Go path (["authentication", "x509", "clientCAFile"]) set."""
    attribute = go_field_names(type(struct))[path[0]]
    if len(path) == 1:
        return msgspec.structs.replace(struct, **{attribute: value})
    return msgspec.structs.replace(struct, **{attribute: _with_nested(getattr(struct, attribute), path[1:], value)})


def build_configuration(argv: Sequence[str]) -> LoadedConfiguration:
    """load_configuration, plus the warnings and which fields were set explicitly."""
    words = _normalize_argv(argv)
    namespace, strays = build_parser().parse_known_args(words)
    if strays:
        raise _stray_argument_error(strays[0], words)
    raw_flags: dict[str, Any] = vars(namespace)  # only the flags given: argument_default=SUPPRESS
    values: dict[str, Any] = {}
    for name, raw in raw_flags.items():
        try:
            values[name] = _FLAGS_BY_NAME[name].parse(raw)
        except ValueError as error:
            shown = _flag_shown(name, raw)
            raise ConfigurationError(f"{shown}: {error}; fix the value of --{name}") from None

    targets = {name: _FLAGS_BY_NAME[name].target.split(".", 1) for name in values}
    flags = KubeletFlags(**{
        attr: values[name] for name, (kind, attr) in targets.items() if kind == "flags"
    })  # fmt: skip
    by_field = {field: name for name, (kind, field) in targets.items() if kind == "config"}  # Go name

    warnings: list[str] = []
    file_fields: frozenset[str] = frozenset()
    config = KubeletConfiguration()
    if flags.config:
        config, file_fields, file_warnings = read_config_file(flags.config)
        warnings.extend(file_warnings)

    # Go re-parses the command line over the file's values: only flags given count.
    changes, logging, nested = {}, {}, {}
    for field, name in by_field.items():
        if field.startswith("logging."):
            logging[_LOGGING_FIELDS[field.removeprefix("logging.")]] = values[name]
        elif "." in field:
            nested[field] = values[name]
        else:
            changes[_CONFIG_FIELDS[field]] = values[name]
    if logging:
        changes["logging"] = msgspec.structs.replace(config.logging, **logging)
    config = msgspec.structs.replace(config, **changes)
    for field, value in nested.items():
        config = _with_nested(config, field.split("."), value)
    if flags.kubeconfig is None:
        # Without an API server the webhooks cannot work: Go's defaults for a kubelet
        # started without --config apply to what was not set (anonymous, AlwaysAllow).
        config = standalone_auth(config, frozenset(file_fields) | frozenset(by_field))

    endpoint = config.container_runtime_endpoint
    if endpoint.startswith("/"):  # Go takes a bare socket path, with a deprecation warning
        warnings.append(f'runtime endpoint "{endpoint}" is deprecated: use "unix://{endpoint}"')
        config = msgspec.structs.replace(config, container_runtime_endpoint=f"unix://{endpoint}")

    warnings.extend(_logging_not_applied(config))
    problems = [*validate_kubelet_configuration(config), *validate_auth(config, flags.kubeconfig is not None)]
    if problems:
        raise ConfigurationError("\n".join(
            _locate(field, problem, by_field, raw_flags, flags.config, file_fields)
            for field, problem in problems
        ))  # fmt: skip
    explicit = (file_fields - {"apiVersion", "kind"}) | frozenset(by_field)
    return LoadedConfiguration(flags, config, tuple(warnings), explicit)


def _logging_not_applied(config: KubeletConfiguration) -> list[str]:
    """The logging settings pykubelet takes but does not apply, named at start."""
    logging, blank = config.logging, LoggingConfiguration()
    warnings = []
    if logging.flush_frequency != blank.flush_frequency:
        warnings.append("logging.flushFrequency is not used: pykubelet writes each log line at once")
    if logging.options:
        warnings.append("logging.options is not applied: the text and json formats take no options")
    return warnings


def _flag_shown(name: str, raw: Any) -> str:
    return f"--{name}={','.join(raw) if isinstance(raw, list) else raw}"


def _locate(field: str, problem: str, by_field: dict[str, str], raw_flags: dict[str, Any],
            config_path: str | None, file_fields: frozenset[str]) -> str:  # fmt: skip
    """A validation problem worded against where the value came from: a flag or the file."""
    flag = by_field.get(field)
    if flag is not None:
        return f"{_flag_shown(flag, raw_flags[flag])}: {problem}; fix the value of --{flag}"
    if config_path and field.split(".")[0] in file_fields:
        return f'--config {config_path}: field "{field}": {problem}; fix the value in the file'
    return f"{field}: {problem}"  # a default value: a bug in pykubelet, not the operator's


# --- node labels (Go: ValidateKubeletFlags and k8s.io/kubelet/pkg/apis) --------------------

_LABEL_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
# Labels a kubelet may set on its own Node in the kubernetes.io and k8s.io namespaces.
KUBELET_LABELS = frozenset({
    "kubernetes.io/hostname", "kubernetes.io/os", "kubernetes.io/arch",
    "topology.kubernetes.io/zone", "topology.kubernetes.io/region",
    "failure-domain.beta.kubernetes.io/zone", "failure-domain.beta.kubernetes.io/region",
    "node.kubernetes.io/instance-type", "beta.kubernetes.io/instance-type",
    "beta.kubernetes.io/os", "beta.kubernetes.io/arch",
})  # fmt: skip
KUBELET_LABEL_NAMESPACES = ("kubelet.kubernetes.io", "node.kubernetes.io")


def _label_problem(key: str, value: str) -> str | None:
    prefix, slash, name = key.rpartition("/")
    if not name or len(name) > 63 or not _LABEL_NAME.match(name):
        return (f"label key {_quote(key)}: the name part must be 1-63 characters of letters, digits, "
                "'-', '_' or '.', starting and ending with a letter or digit")  # fmt: skip
    if slash and (len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix)):
        return f"label key {_quote(key)}: the prefix must be a DNS subdomain such as example.com"
    if value and (len(value) > 63 or not _LABEL_NAME.match(value)):
        return (f"label {key}={value}: the value must be at most 63 characters of letters, digits, "
                "'-', '_' or '.', starting and ending with a letter or digit")  # fmt: skip

    def within(namespaces: Sequence[str]) -> bool:
        return any(prefix == ns or prefix.endswith("." + ns) for ns in namespaces)

    allowed = key in KUBELET_LABELS or within(KUBELET_LABEL_NAMESPACES)
    if within(("kubernetes.io", "k8s.io")) and not allowed:
        return (f"label {_quote(key)}: in the kubernetes.io and k8s.io namespaces a kubelet sets only "
                f"keys under {' or '.join(KUBELET_LABEL_NAMESPACES)} and the well-known "
                f"{', '.join(sorted(KUBELET_LABELS))}")  # fmt: skip
    return None


# --- the root directory ------------------------------------------------------------------


def prepare_root_dir(path: str) -> Path:
    """mkdir -p the --root-dir; a ConfigurationError names the path, the OS error and the fix."""
    root, where = Path(path), f"--root-dir {path}"
    try:
        root.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise ConfigurationError(f"{where}: exists and is not a directory; choose a directory") from None
    except OSError as error:
        problem = f"cannot create: {error}; choose a writable directory"
        raise ConfigurationError(f"{where}: {problem}") from None
    if not root.is_dir():
        raise ConfigurationError(f"{where}: exists and is not a directory; choose a directory")
    if not os.access(root, os.W_OK | os.X_OK):
        raise ConfigurationError(f"{where}: not writable by this user; choose a writable directory")
    return root
