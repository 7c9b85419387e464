"""The daemon's logs: klog text and JSON lines, and which lines --v and --vmodule let
through (klog's rules: the first matching file pattern decides, globs as Go's filepath.Match)."""

from __future__ import annotations

import io
import json
import logging

import pytest

from pykubelet.cli.config import ConfigurationError, build_configuration
from pykubelet.cli.logs import (
    VerbosityFilter,
    VModuleError,
    configure_daemon_logging,
    configure_logging,
    level_for_verbosity,
    log_fields,
    parse_vmodule,
)
from pykubelet.supervisor.verbosity import V, verbosity_of

HEADER = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"


@pytest.fixture
def restore_logging():
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


def test_json_logging_emits_one_parseable_object_a_line_with_the_fields(restore_logging):
    stream = io.StringIO()
    configure_logging("json", 0, stream=stream)
    log = logging.getLogger("pykubelet.test")
    log.info("container started", extra=log_fields(pod="default/web", container="app", restarts=2, name="x"))
    log.warning("runtime slow", extra={"actor": "root/runtime"})
    log.log(V(4), "not shown at v=0")
    first, second = (json.loads(line) for line in stream.getvalue().splitlines())
    assert first["msg"] == "container started"
    assert first["level"] == "info" and first["v"] == 0
    assert isinstance(first["ts"], float) and first["caller"].startswith("test_logs.py:")
    fields = (first["pod"], first["container"], first["restarts"], first["name"])
    assert fields == ("default/web", "app", 2, "x")
    assert (second["level"], second["actor"]) == ("warning", "root/runtime")


def test_json_logging_puts_the_exception_in_err(restore_logging):
    stream = io.StringIO()
    configure_logging("json", 0, stream=stream)
    try:
        raise RuntimeError("socket gone")
    except RuntimeError:
        logging.getLogger("pykubelet.test").exception("relist failed")
    entry = json.loads(stream.getvalue())
    assert entry["err"] == "RuntimeError: socket gone"
    assert "Traceback" in entry["stacktrace"]


def test_text_logging_is_one_klog_line(restore_logging):
    stream = io.StringIO()
    configure_logging("text", 0, stream=stream)
    logging.getLogger("pykubelet.test").warning("probe failed", extra=log_fields(pod="default/web", ok=False))
    line = stream.getvalue()
    assert line.count("\n") == 1
    assert line.startswith("W")
    assert ' test_logs.py:' in line
    assert line.rstrip().endswith('] "probe failed" pod="default/web" ok=false')


@pytest.mark.parametrize("verbosity, level", [(0, logging.INFO), (2, logging.INFO - 2), (4, logging.INFO - 4),
                                              (10, 1), (50, 1)])
def test_verbosity_is_the_lowest_level_let_through(restore_logging, verbosity, level):
    assert level_for_verbosity(verbosity) == level
    configure_logging("text", verbosity, stream=io.StringIO())
    assert logging.getLogger().level == level


def test_configure_logging_twice_keeps_one_handler(restore_logging):
    before = len(logging.getLogger().handlers)
    configure_logging("text", 0, stream=io.StringIO())
    configure_logging("json", 0, stream=io.StringIO())
    assert len(logging.getLogger().handlers) == before + 1


def test_configure_logging_refuses_an_unknown_format(restore_logging):
    with pytest.raises(ValueError, match="use text or json"):
        configure_logging("xml", 0)


def record(path: str, level: int, name: str = "pykubelet.test") -> logging.LogRecord:
    return logging.LogRecord(name, level, path, 1, "m", None, None)


def test_v_levels_sit_between_info_and_debug():
    assert (V(0), V(4), V(10)) == (logging.INFO, logging.INFO - 4, logging.DEBUG)
    assert [verbosity_of(level) for level in (V(0), V(3), logging.DEBUG, 5, logging.WARNING, logging.ERROR)] == [
        0, 3, 10, 10, None, None]
    with pytest.raises(ValueError, match="from 0 to 10"):
        V(11)


@pytest.mark.parametrize("verbosity, shown", [(0, [0]), (2, [0, 1, 2]), (4, [0, 1, 2, 3, 4])])
def test_v_lets_through_lines_at_or_below_it(verbosity, shown):
    selected = VerbosityFilter(verbosity)
    assert [n for n in range(6) if selected.filter(record("/src/actors/pleg.py", V(n)))] == shown
    assert selected.filter(record("/src/actors/pleg.py", logging.WARNING))
    assert selected.filter(record("/src/actors/pleg.py", logging.ERROR))


@pytest.mark.parametrize("pattern, files", [
    ("pleg", ["pleg"]),                       # literal: the base name without .py
    ("p*", ["pleg", "pod_config"]),           # * within a name
    ("?leg", ["pleg"]),
    ("[ps]*p", ["sync_loop"]),                # class, then glob
    ("[^p]*", ["sync_loop", "worker"]),       # Go negates with ^
    ("sync\\_loop", ["sync_loop"]),            # backslash quotes
    ("pleg.py", []),                          # the extension is not part of the name
    ("actors/pleg", []),                      # nor the directory
    ("[", []),                                # a bad pattern matches nothing, as in Go
])
def test_vmodule_matches_the_base_name_without_extension_as_klog(pattern, files):
    selected = VerbosityFilter(0, [(pattern, 4)])
    paths = ["/x/actors/pleg.py", "/x/actors/pod_config.py", "/x/actors/sync_loop.py",
             "/x/actors/pod_workers/worker.py"]
    assert [p.rsplit("/", 1)[1][:-3] for p in paths if selected.filter(record(p, V(4)))] == files


def test_vmodule_first_matching_pattern_decides_and_global_v_still_applies():
    selected = VerbosityFilter(2, [("pleg", 3), ("p*", 6)])
    assert selected.file_verbosity("/x/pleg.py") == 3
    assert not selected.filter(record("/x/pleg.py", V(4)))      # pleg=3 came first
    assert selected.filter(record("/x/pod_config.py", V(6)))
    assert selected.filter(record("/x/gc.py", V(2)))            # --v=2 everywhere
    assert not selected.filter(record("/x/gc.py", V(3)))


def test_vmodule_pattern_zero_is_dropped_as_klog_does():
    # klog ignores "pleg=0", so the later glob applies to pleg.
    selected = VerbosityFilter(0, [("pleg", 0), ("p*", 4)])
    assert selected.filter(record("/x/pleg.py", V(4)))


def test_library_request_lines_count_as_v6():
    assert not VerbosityFilter(5).filter(record("/lib/httpx/_client.py", logging.INFO, name="httpx"))
    assert VerbosityFilter(6).filter(record("/lib/httpx/_client.py", logging.INFO, name="httpx"))
    assert VerbosityFilter(0, [("_client", 6)]).filter(record("/lib/httpx/_client.py", logging.INFO, name="httpx"))


def test_vmodule_selects_lines_of_one_file_end_to_end(restore_logging):
    """Two real files logging at V(4): only the one --vmodule names is shown."""
    stream = io.StringIO()
    configure_logging("text", 0, [("test_logs", 4)], stream=stream)
    logging.getLogger("pykubelet.test").log(V(4), "from this file")
    logging.getLogger("pykubelet.test").log(V(5), "too verbose")
    logging.getLogger().handlers[-1].handle(record("/x/actors/pleg.py", V(4)))
    lines = stream.getvalue().splitlines()
    assert len(lines) == 1 and lines[0].startswith("I") and '"from this file"' in lines[0]
    assert logging.getLogger().level == V(4)  # records below every threshold are not even made


def test_json_lines_carry_v_and_level_info(restore_logging):
    stream = io.StringIO()
    configure_logging("json", 3, stream=stream)
    logging.getLogger("pykubelet.test").log(V(3), "detail")
    entry = json.loads(stream.getvalue())
    assert (entry["level"], entry["v"], entry["msg"]) == ("info", 3, "detail")


@pytest.mark.parametrize("value, items", [
    ("pleg=4", [("pleg", 4)]),
    ("pleg=4,sync_*=2,", [("pleg", 4), ("sync_*", 2)]),
    ("", []),
])
def test_parse_vmodule_reads_go_syntax(value, items):
    assert parse_vmodule(value) == items


@pytest.mark.parametrize("value, message", [
    ("pleg", '"pleg" does not have the pattern=N format'),
    ("=4", '"=4" does not have the pattern=N format'),
    ("a=b=1", '"a=b=1" does not have the pattern=N format'),
    ("pleg=-1", 'parsing verbosity in "pleg=-1"'),
    ("pleg=x", 'parsing verbosity in "pleg=x"'),
])
def test_parse_vmodule_refuses_what_go_refuses(value, message):
    with pytest.raises(VModuleError, match=message):
        parse_vmodule(value)


def test_vmodule_flag_and_config_field_reach_the_logging_setup(tmp_path, restore_logging):
    path = tmp_path / "kubelet.yaml"
    path.write_text(HEADER + "logging: {vmodule: [{filePattern: pleg, verbosity: 4}]}\n")
    from_file = build_configuration(["--config", str(path)]).config.logging
    assert [(i.file_pattern, i.verbosity) for i in from_file.vmodule] == [("pleg", 4)]
    from_flag = build_configuration(["--config", str(path), "--vmodule=test_logs=5,gc=2"]).config.logging
    assert [(i.file_pattern, i.verbosity) for i in from_flag.vmodule] == [("test_logs", 5), ("gc", 2)]  # the flag wins
    handler = configure_daemon_logging(from_flag)
    (selected,) = handler.filters
    assert (selected.file_verbosity("/x/test_logs.py"), selected.file_verbosity("/x/gc.py")) == (5, 2)


@pytest.mark.parametrize("argv, body, message", [
    (["--vmodule=pleg"], "", '--vmodule=pleg: "pleg" does not have the pattern=N format; fix the value of --vmodule'),
    (["--vmodule=pleg=4", "--logging-format=json"], "",
     '--vmodule=pleg=4: only supported for the text log format, not "json"; fix the value of --vmodule'),
    ([], "logging: {vmodule: [{filePattern: 'a,b', verbosity: 1}]}\n",
     'field "logging.vmodule[0]": "a,b": file pattern must not contain an equal sign or a comma'),
    ([], "logging: {vmodule: [{filePattern: '', verbosity: 1}]}\n", 'file pattern must not be empty'),
])
def test_vmodule_errors_name_the_flag_or_field(tmp_path, argv, body, message):
    path = tmp_path / "kubelet.yaml"
    path.write_text(HEADER + body)
    with pytest.raises(ConfigurationError) as error:
        build_configuration(["--config", str(path), *argv])
    assert message in str(error.value)
