"""The KubeletConfiguration file (read_config_file) and the command line
(build_configuration): every input is a configuration or a ConfigurationError naming the
flag or the file's field. Go durations parse and print as Go does, round trip included."""

from __future__ import annotations

import math
import os

import msgspec
import yaml
from hypothesis import example, given, strategies as st

from pykubelet.cli.config import ConfigurationError, LoadedConfiguration, build_configuration, read_config_file
from pykubelet.cli.config.flags import FLAGS
from pykubelet.messages.config import API_VERSION, KIND, KubeletConfiguration, go_field_names
from pykubelet.messages.duration import Duration, DurationError, format_duration, parse_duration

from .support import scratch_directory, tried, valid

_DIRECTORY = scratch_directory("pykubelet-fuzz-config-")
_CONFIG = os.path.join(_DIRECTORY, "config.yaml")
_DEFAULTS = KubeletConfiguration()
_FIELDS = go_field_names(KubeletConfiguration)  # Go name -> attribute

# --- Go durations -----------------------------------------------------------------------

durations_ns = st.integers(-(2**63) + 1, 2**63 - 1)
unit_words = st.sampled_from(["ns", "us", "µs", "μs", "ms", "s", "m", "h", "", "d", "x", "sec"])
duration_texts = st.one_of(
    st.builds(
        lambda sign, parts: sign + "".join(parts),
        st.sampled_from(["", "-", "+"]),
        st.lists(st.builds(lambda n, frac, unit: f"{n}{frac}{unit}", st.integers(0, 10**12).map(str) | st.just(""),
                           st.sampled_from(["", ".", ".5", ".000000001", ".12345678901"]), unit_words), max_size=4),
    ),
    st.text(max_size=20),
)


@given(st.integers(-(2**53), 2**53))
def test_a_duration_formats_then_parses_back_to_the_same_nanoseconds(ns):
    tried("go duration")
    seconds = ns / 1e9
    text = format_duration(seconds)
    assert round(parse_duration(text) * 1e9) == round(seconds * 1e9), text
    assert format_duration(parse_duration(text)) == text
    valid("go duration")


@given(duration_texts)
@example("9223372036854775808ns")
@example("-.s")
@example("1.h")
@example("0")
def test_any_text_is_a_duration_or_a_duration_error(text):
    tried("go duration")
    try:
        duration = parse_duration(text)
    except DurationError as error:
        assert "duration" in str(error)
        return
    valid("go duration")
    assert isinstance(duration, Duration) and math.isfinite(duration)
    assert parse_duration(format_duration(duration)) == Duration(round(duration * 1e9) / 1e9) or abs(duration) > 2**52 / 1e9


# --- the --config file ------------------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False) | st.text(max_size=16),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=10), inner, max_size=3),
    max_leaves=8,
)


def _value_for(default) -> st.SearchStrategy:
    """A value of the field's own kind (mostly sensible), or sometimes anything."""
    if isinstance(default, Duration):
        own = st.one_of(duration_texts, st.integers(0, 10**6).map(lambda s: format_duration(s)))
    elif isinstance(default, bool):
        own = st.booleans()
    elif isinstance(default, int):
        own = st.integers(-5, 70000) | st.integers(-(2**40), 2**40)
    elif isinstance(default, str):
        own = st.text(max_size=16) | st.sampled_from(["", "0.0.0.0", "::", "/var/lib", "relative/dir", "text", "json", "Webhook"])
    elif isinstance(default, dict):
        own = st.dictionaries(st.sampled_from(["memory.available", "nodefs.available", "cpu", "pid", "x"]),
                              st.sampled_from(["100Mi", "10%", "1", "-1", "abc", "0.5"]), max_size=3)
    elif isinstance(default, list):
        own = st.lists(st.text(max_size=8), max_size=3)
    elif isinstance(default, msgspec.Struct):
        own = st.fixed_dictionaries({}, optional={name: _value_for(getattr(default, attr))
                                                   for name, attr in go_field_names(type(default)).items()})
    else:
        own = json_values
    return st.one_of(own, own, own, json_values)


config_documents = st.fixed_dictionaries(
    {"apiVersion": st.just(API_VERSION), "kind": st.just(KIND)},
    optional={
        **{name: _value_for(getattr(_DEFAULTS, attr)) for name, attr in _FIELDS.items() if name not in ("apiVersion", "kind")},
        "serializeImagePulsl": st.booleans(),  # a typo: "did you mean"
        "featureGates": st.dictionaries(st.text(max_size=8), st.booleans(), max_size=2),  # Go-only: a warning
    },
)


def _read(data: bytes):
    with open(_CONFIG, "wb") as f:
        f.write(data)
    tried("kubelet config file")
    try:
        loaded = read_config_file(_CONFIG)
    except ConfigurationError as error:
        assert str(error).startswith(f"--config {_CONFIG}: "), error
        return error
    valid("kubelet config file")
    return loaded


@given(config_documents)
def test_a_config_file_is_a_configuration_or_an_error_naming_the_file(document):
    _read(yaml.safe_dump(document, allow_unicode=True).encode())


@given(st.binary(max_size=300) | st.text(max_size=300).map(str.encode))
@example(b"[" * 3000)
@example(b"a: &a [*a, *a]\nb: *a\n")
@example(b"apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n? [a]\n: 1\n")
@example(b"apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n1: 2\n")
def test_arbitrary_bytes_are_a_configuration_or_an_error_naming_the_file(data):
    _read(data)


# --- the command line -------------------------------------------------------------------

_FLAG_VALUES = st.one_of(
    st.text(max_size=12),
    st.sampled_from(["true", "false", "0", "1", "10s", "1m30s", "-1s", "127.0.0.1", "::1", "10.0.0.1,fd00::1",
                     "10.0.0.1,10.0.0.2", "a=b,c=d", "kubernetes.io/x=y", "Accept:json", "9999999999", "embedded",
                     "unix:///run/x.sock", "/run/x.sock", "json", "text", "Webhook", "AlwaysAllow", _CONFIG]),
)


@st.composite
def command_lines(draw) -> list[str]:
    words: list[str] = []
    for _ in range(draw(st.integers(0, 5))):
        flag = draw(st.sampled_from(FLAGS))
        name = flag.name.replace("-", draw(st.sampled_from(["-", "_"]))) if flag.name != "v" else "v"
        spelling = draw(st.sampled_from(["=", " ", "bare"]))
        value = draw(_FLAG_VALUES)
        if spelling == "=":
            words.append(f"--{name}={value}")
        elif spelling == " ":
            words += [f"--{name}", value]
        else:
            words.append(f"--{name}")
    if draw(st.booleans()):
        words.insert(draw(st.integers(0, len(words))), draw(st.text(max_size=10) | st.sampled_from(["--", "-", "--nope", "-v=3", "-x"])))
    return [w for w in words if w not in ("-h", "--help")]  # help prints and exits 0, by design


def _build(argv: list[str]):
    tried("kubelet command line")
    try:
        loaded = build_configuration(argv)
    except ConfigurationError as error:
        assert str(error), argv
        return error
    assert isinstance(loaded, LoadedConfiguration)
    valid("kubelet command line")
    return loaded


@given(command_lines())
@example(["--config="])
@example(["--node-ip=1.2.3.4,,"])
@example(["--port", "99999999999999999999999999"])
def test_a_command_line_is_a_configuration_or_an_error_naming_the_flag(argv):
    result = _build(argv)
    if isinstance(result, ConfigurationError) and argv and all(w.startswith("--") and "=" in w for w in argv):
        message = str(result)
        assert "--" in message or "field" in message or "config" in message, message


@given(command_lines(), config_documents)
def test_flags_over_a_fuzzed_config_file(argv, document):
    with open(_CONFIG, "wb") as f:
        f.write(yaml.safe_dump(document, allow_unicode=True).encode())
    _build([*argv, f"--config={_CONFIG}"])
