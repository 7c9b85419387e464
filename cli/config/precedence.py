"""The effective configuration of `pykubelet run`: defaults < --config file < flags given,
as the Go kubelet's kubeletConfigFlagPrecedence lays them, then validated; each problem is
worded against where its value came from (the flag or the file's field)."""

from __future__ import annotations

from typing import Any, Sequence

import msgspec

from pykubelet.messages.config import KubeletConfiguration, KubeletFlags, LoggingConfiguration
from pykubelet.messages.config_validation import validate_kubelet_configuration
from pykubelet.pods.kubelet_auth import standalone_auth, validate_auth

from .config_file import CONFIG_FIELDS, LOGGING_FIELDS, read_config_file, with_nested
from .errors import ConfigurationError
from .flags import FLAGS_BY_NAME, build_parser, normalize_argv, stray_argument_error


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


def build_configuration(argv: Sequence[str]) -> LoadedConfiguration:
    """load_configuration, plus the warnings and which fields were set explicitly."""
    words = normalize_argv(argv)
    namespace, strays = build_parser().parse_known_args(words)
    if strays:
        raise stray_argument_error(strays[0], words)
    raw_flags: dict[str, Any] = vars(namespace)  # only the flags given: argument_default=SUPPRESS
    values: dict[str, Any] = {}
    for name, raw in raw_flags.items():
        try:
            values[name] = FLAGS_BY_NAME[name].parse(raw)
        except ValueError as error:
            shown = _flag_shown(name, raw)
            raise ConfigurationError(f"{shown}: {error}; fix the value of --{name}") from None

    targets = {name: FLAGS_BY_NAME[name].target.split(".", 1) for name in values}
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
            logging[LOGGING_FIELDS[field.removeprefix("logging.")]] = values[name]
        elif "." in field:
            nested[field] = values[name]
        else:
            changes[CONFIG_FIELDS[field]] = values[name]
    if logging:
        changes["logging"] = msgspec.structs.replace(config.logging, **logging)
    config = msgspec.structs.replace(config, **changes)
    for field, value in nested.items():
        config = with_nested(config, field.split("."), value)
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
