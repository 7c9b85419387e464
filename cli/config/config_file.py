"""The --config file: one KubeletConfiguration read as strict YAML, decoded with an
operator-worded error (file, field, "did you mean", fix), Go-only fields dropped with a
warning, defaulted as Go defaults it, paths made relative to the file."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, NamedTuple

import msgspec
import yaml

from pykubelet.messages import strict_yaml
from pykubelet.messages.config import (
    API_VERSION,
    GO_ONLY_FIELDS,
    KIND,
    KubeletConfiguration,
    LoggingConfiguration,
    VModuleItem,
    go_field_names,
    set_defaults,
)
from pykubelet.messages.duration import dec_hook

from .errors import ConfigurationError, quote

CONFIG_FIELDS = go_field_names(KubeletConfiguration)  # Go name -> Python attribute
LOGGING_FIELDS = go_field_names(LoggingConfiguration)
_KNOWN_FIELDS = {  # for "did you mean": by the path of the mapping the unknown name is in
    "": set(CONFIG_FIELDS) | GO_ONLY_FIELDS,
    "logging": set(LOGGING_FIELDS),
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
            raise ConfigurationError(f'{where}: field "{field}": {quote(document[field])} is not '
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
        config = with_nested(config, ["authentication", "x509", "clientCAFile"], str(base / ca_file))
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
        raise ConfigurationError(f"{where}: field {quote(error.key)} is set twice (lines {error.first_line} "
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
        problem += f" {quote(value)}"
    return f'field "{field}": {problem}; fix the value in the file'


def _suggest(name: str, known: set[str], parent: str) -> str:
    prefix = f"{parent}." if parent else ""
    by_case = {candidate.lower(): candidate for candidate in known}
    if name.lower() in by_case:
        return f' (did you mean "{prefix}{by_case[name.lower()]}"? names are case-sensitive)'
    import difflib  # here: only a misspelled name needs it, a daemon that starts never loads it

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


def with_nested(struct: Any, path: list[str], value: Any) -> Any:
    """`struct` with the field at the Go path (["authentication", "x509", "clientCAFile"]) set."""
    attribute = go_field_names(type(struct))[path[0]]
    if len(path) == 1:
        return msgspec.structs.replace(struct, **{attribute: value})
    return msgspec.structs.replace(struct, **{attribute: with_nested(getattr(struct, attribute), path[1:], value)})
