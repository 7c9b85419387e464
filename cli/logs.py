"""Logging of the daemon: klog's text or JSON lines on stderr, chosen by --v and --vmodule.

The daemon's main calls configure_logging once with the effective logging.format,
logging.verbosity and logging.vmodule. Modules log through logging.getLogger(__name__), detail
at klog's V levels (log.log(V(4), ...), supervisor/verbosity.py), and pass the event's
Kubernetes context as fields: log.info("container started", extra=log_fields(pod=..., container=...)).
"""

from __future__ import annotations

import json
import logging
import re
import sys
import time
import traceback
from typing import Any, Iterable, TextIO

from pykubelet.messages.config import LoggingConfiguration
from pykubelet.supervisor.verbosity import MAX_VERBOSITY, V, verbosity_of

_FIELDS = "pykubelet_fields"  # the LogRecord attribute log_fields() fills
_STANDARD = {*logging.LogRecord("", 0, "", 0, "", None, None).__dict__, "message", "asctime", _FIELDS}
# klog has no debug letter: V(n) lines are info lines.
_LETTER = {logging.WARNING: "W", logging.ERROR: "E", logging.CRITICAL: "F"}
# Loggers of libraries that log every request at INFO: their INFO lines count as V(6), where
# klog's clients show their requests.
_CHATTY = ("httpx", "httpcore", "hpack")
_REQUEST_VERBOSITY = 6
_INSTALLED = "_pykubelet_handler"


def log_fields(**fields: Any) -> dict[str, Any]:
    """The `extra=` of a log call carrying structured fields. Any name is allowed, even those a
    LogRecord uses itself ("name", "msg"), which a plain extra={...} would refuse."""
    return {_FIELDS: fields}


def level_for_verbosity(verbosity: int) -> int:
    """The lowest level a logger must let through for --v=verbosity: V(verbosity), and from
    V(10) on every record whatever its level (a library's below DEBUG too)."""
    return V(max(verbosity, 0)) if verbosity < MAX_VERBOSITY else 1


class VModuleError(ValueError):
    """A --vmodule value that is not a comma-separated list of pattern=N."""


def parse_vmodule(value: str) -> list[tuple[str, int]]:
    """--vmodule=pattern=N,...: (pattern, N) pairs in order, as Go's VModuleConfiguration.Set
    reads them (empty entries skipped; N from 0 to 2^31-1)."""
    items = []
    for entry in value.split(","):
        if not entry:
            continue
        pattern, *rest = entry.split("=")
        if len(rest) != 1 or not pattern or not rest[0]:
            raise VModuleError(f"{json.dumps(entry)} does not have the pattern=N format")
        if not rest[0].isdigit() or int(rest[0]) > 2**31 - 1:
            raise VModuleError(f"parsing verbosity in {json.dumps(entry)}: not a number from 0 to {2**31 - 1}")
        items.append((pattern, int(rest[0])))
    return items


class VerbosityFilter(logging.Filter):
    """Lets a V(n) record through when n <= --v, or n <= the --vmodule level of its source file.

    As klog: the file is the base name without its extension (.py here, .go there); the
    first pattern that matches decides; a pattern without * ? [ ] \\ is compared literally,
    one with them as Go's filepath.Match globs; a pattern=0 entry is dropped (klog ignores
    it). Warnings and errors always pass.
    """

    def __init__(self, verbosity: int = 0, vmodule: Iterable[tuple[str, int]] = ()) -> None:
        super().__init__()
        self.verbosity = verbosity
        self.vmodule = [(pattern, _file_matcher(pattern), level) for pattern, level in vmodule if level > 0]
        self._by_path: dict[str, int] = {}

    @property
    def highest(self) -> int:
        """The highest verbosity any file logs at."""
        return max([self.verbosity, *(level for _, _, level in self.vmodule)])

    def file_verbosity(self, pathname: str) -> int:
        """The --vmodule level of a source file (0 when no pattern matches)."""
        level = self._by_path.get(pathname)
        if level is None:
            base = pathname.rsplit("/", 1)[-1]
            base = base[:-3] if base.endswith(".py") else base
            level = next((level for _, matches, level in self.vmodule if matches(base)), 0)
            self._by_path[pathname] = level
        return level

    def filter(self, record: logging.LogRecord) -> bool:
        wanted = verbosity_of(record.levelno)
        if wanted is None:
            return True
        if wanted == 0 and record.name.partition(".")[0] in _CHATTY:
            wanted = _REQUEST_VERBOSITY
        return wanted <= self.verbosity or (bool(self.vmodule) and wanted <= self.file_verbosity(record.pathname))


def _file_matcher(pattern: str):
    if not any(c in pattern for c in "\\*?[]"):
        return pattern.__eq__
    regex = _go_glob_regex(pattern)
    if regex is None:  # Go's filepath.Match reports ErrBadPattern: klog then never matches
        return lambda name: False
    return regex.fullmatch


def _go_glob_regex(pattern: str) -> re.Pattern[str] | None:
    """Go's filepath.Match syntax as a regular expression: * and ? (not across /), [class]
    with ^ for negation and ranges, \\ quoting the next character."""
    out, i = [], 0
    while i < len(pattern):
        c = pattern[i]
        if c == "*":
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "\\":
            if i + 1 == len(pattern):
                return None
            i += 1
            out.append(re.escape(pattern[i]))
        elif c == "[":
            i, group = _go_glob_class(pattern, i + 1)
            if group is None:
                return None
            out.append(group)
        elif c == "]":
            return None
        else:
            out.append(re.escape(c))
        i += 1
    try:
        return re.compile("".join(out))
    except re.error:  # a range out of order ([z-a]): a bad pattern to Go as well
        return None


def _go_glob_class(pattern: str, i: int) -> tuple[int, str | None]:
    """The [class] opened before pattern[i], as a regex class; (index of its ], None) if bad."""
    negated = pattern[i : i + 1] == "^"
    i += negated
    body = []
    while i < len(pattern) and pattern[i] != "]":
        c = pattern[i]
        if c == "\\":
            i += 1
            if i == len(pattern):
                return i, None
            c = pattern[i]
        body.append("-" if c == "-" and body and i + 1 < len(pattern) and pattern[i + 1] != "]" else re.escape(c))
        i += 1
    if i == len(pattern) or not body:
        return i, None
    return i, "[" + ("^/" if negated else "") + "".join(body) + "]"


def record_fields(record: logging.LogRecord) -> dict[str, Any]:
    """The structured fields of a record: log_fields() ones, then any plain extra={...} ones."""
    fields = dict(getattr(record, _FIELDS, None) or {})
    for key, value in record.__dict__.items():
        if key not in _STANDARD and not key.startswith("_"):
            fields.setdefault(key, value)
    return fields


class KlogTextFormatter(logging.Formatter):
    """`I1122 22:07:06.123456    4242 config.py:42] "message" pod="default/web" restarts=3`."""

    def format(self, record: logging.LogRecord) -> str:
        seconds = time.localtime(record.created)
        micros = int(record.created % 1 * 1_000_000)
        letter = _LETTER.get(record.levelno, "I")
        line = (
            f"{letter}{time.strftime('%m%d %H:%M:%S', seconds)}.{micros:06d} {record.process:7d} "
            f"{record.filename}:{record.lineno}] {json.dumps(record.getMessage(), ensure_ascii=False)}"
        )
        fields = record_fields(record)
        if record.exc_info:
            fields.setdefault("err", _error_text(record.exc_info))
        for key, value in fields.items():
            line += f" {key}={_text_value(value)}"
        if record.exc_info:
            line += "\n" + "".join(traceback.format_exception(*record.exc_info)).rstrip()
        return line


class KlogJsonFormatter(logging.Formatter):
    """One JSON object a line, as klog's JSON format: {"ts":..., "caller":..., "msg":..., "v":0, ...}."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": round(record.created, 6),
            "caller": f"{record.filename}:{record.lineno}",
            "level": "info" if record.levelno < logging.WARNING else record.levelname.lower(),
            "msg": record.getMessage(),
        }
        verbosity = verbosity_of(record.levelno)
        if verbosity is not None:
            entry["v"] = verbosity
        if record.exc_info:
            entry["err"] = _error_text(record.exc_info)
            entry["stacktrace"] = "".join(traceback.format_exception(*record.exc_info))
        for key, value in record_fields(record).items():
            entry.setdefault(key, value)
        return json.dumps(entry, ensure_ascii=False, separators=(",", ":"), default=str)


def configure_logging(
    format: str = "text", verbosity: int = 0, vmodule: Iterable[tuple[str, int]] = (), *,
    stream: TextIO | None = None,
) -> logging.Handler:
    """Send log records to `stream` (stderr) in `format` ("text" or "json"): warnings and
    errors always, V(n) lines where n <= `verbosity` or n <= the `vmodule` level of the file
    that logs them. Calling it again replaces the handler it installed before."""
    formatters = {"text": KlogTextFormatter, "json": KlogJsonFormatter}
    if format not in formatters:
        raise ValueError(f"logging format {format!r}: use text or json")
    root = logging.getLogger()
    for handler in list(root.handlers):
        if getattr(handler, _INSTALLED, False):
            root.removeHandler(handler)
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(formatters[format]())
    selected = VerbosityFilter(verbosity, vmodule)
    handler.addFilter(selected)
    setattr(handler, _INSTALLED, True)
    root.addHandler(handler)
    # Loggers drop what no file wants before a record is even made; the filter decides the rest.
    root.setLevel(level_for_verbosity(selected.highest))
    for name in _CHATTY:
        logging.getLogger(name).setLevel(logging.NOTSET if selected.highest >= _REQUEST_VERBOSITY else logging.WARNING)
    return handler


def configure_daemon_logging(config: LoggingConfiguration) -> logging.Handler:
    """configure_logging with KubeletConfiguration's logging: format, verbosity and vmodule."""
    vmodule = [(item.file_pattern, item.verbosity) for item in config.vmodule]
    return configure_logging(config.format, config.verbosity, vmodule)


def _error_text(exc_info: Any) -> str:
    return "".join(traceback.format_exception_only(exc_info[0], exc_info[1])).strip()


def _text_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    if value is None:
        return "<nil>"
    return json.dumps(value if isinstance(value, str) else str(value), ensure_ascii=False)
