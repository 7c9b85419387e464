"""The flags of `pykubelet run`, by the Go kubelet's names: each flag's parser and target
(a KubeletFlags attribute or a KubeletConfiguration field), the argparse parser, Go pflag
spellings, and "did you mean" for an unknown flag."""

from __future__ import annotations

import argparse
import ipaddress
from dataclasses import dataclass
from typing import Any, Callable, NoReturn, Sequence

from pykubelet.messages.config import DEFAULT_RUNTIME_ENDPOINT, VModuleItem
from pykubelet.messages.duration import DurationError, parse_duration

from ..logs import parse_vmodule
from .errors import ConfigurationError, quote
from .node_labels import label_problem


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
        problem = label_problem(key, value)
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
                raise ValueError(f"malformed header {quote(pair)}: expected name:value")
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


FLAGS = (
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
FLAGS_BY_NAME = {flag.name: flag for flag in FLAGS}
_BOOLEAN_FLAGS = {flag.name for flag in FLAGS if flag.boolean}


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
    for flag in FLAGS:
        names = ["-v", "--v"] if flag.name == "v" else [f"--{flag.name}"]
        parser.add_argument(
            *names,
            dest=flag.name,
            metavar=flag.metavar,
            help=flag.help,
            action="append" if flag.repeated else "store",
        )
    return parser


def normalize_argv(argv: Sequence[str]) -> list[str]:
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


def stray_argument_error(stray: str, argv: list[str]) -> ConfigurationError:
    if stray.startswith("-") and stray != "-":
        name = stray.lstrip("-").partition("=")[0]
        import difflib  # here: only a misspelled flag needs it, a daemon that starts never loads it

        close = difflib.get_close_matches(name, list(FLAGS_BY_NAME), n=1)
        hint = f"; did you mean --{close[0]}?" if close else "; see pykubelet run --help"
        return ConfigurationError(f"unknown flag {stray.partition('=')[0]}{hint}")
    position = argv.index(stray)
    before = argv[position - 1] if position else ""
    flag = before[2:].partition("=")[0] if before.startswith("--") else ""
    if flag in _BOOLEAN_FLAGS:
        return ConfigurationError(
            f"unexpected argument {quote(stray)} after --{flag}: a boolean flag takes its value "
            f"after '=': --{flag}={stray}"
        )
    return ConfigurationError(f"unexpected argument {quote(stray)}: pykubelet run takes only flags")
