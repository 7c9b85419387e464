"""Logging of the daemon: klog's text or JSON lines on stderr, --v mapped onto levels.

The daemon's main calls configure_logging once with the effective logging.format and
logging.verbosity. Modules log through logging.getLogger(__name__) and pass the event's
Kubernetes context as fields: log.info("container started", extra=log_fields(pod=..., container=...)).
"""

from __future__ import annotations

import json
import logging
import sys
import time
import traceback
from typing import Any, TextIO

_FIELDS = "pykubelet_fields"  # the LogRecord attribute log_fields() fills
_STANDARD = {*logging.LogRecord("", 0, "", 0, "", None, None).__dict__, "message", "asctime", _FIELDS}
# klog has no debug letter: V(n) lines are info lines.
_LETTER = {logging.WARNING: "W", logging.ERROR: "E", logging.CRITICAL: "F"}
# Loggers of libraries that log every request at INFO; klog shows requests from --v=6 on.
_CHATTY = ("httpx", "httpcore", "hpack")
DEBUG_VERBOSITY = 4
_INSTALLED = "_pykubelet_handler"


def log_fields(**fields: Any) -> dict[str, Any]:
    """The `extra=` of a log call carrying structured fields. Any name is allowed, even those a
    LogRecord uses itself ("name", "msg"), which a plain extra={...} would refuse."""
    return {_FIELDS: fields}


def level_for_verbosity(verbosity: int) -> int:
    """--v=0..3: INFO and above; --v=4 and more: DEBUG too (klog's V(4) is debug detail)."""
    return logging.DEBUG if verbosity >= DEBUG_VERBOSITY else logging.INFO


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
            "level": record.levelname.lower(),
            "msg": record.getMessage(),
        }
        if record.levelno < logging.WARNING:
            entry["v"] = DEBUG_VERBOSITY if record.levelno < logging.INFO else 0
        if record.exc_info:
            entry["err"] = _error_text(record.exc_info)
            entry["stacktrace"] = "".join(traceback.format_exception(*record.exc_info))
        for key, value in record_fields(record).items():
            entry.setdefault(key, value)
        return json.dumps(entry, ensure_ascii=False, separators=(",", ":"), default=str)


def configure_logging(
    format: str = "text", verbosity: int = 0, *, stream: TextIO | None = None
) -> logging.Handler:
    """Send every log record to `stream` (stderr) in `format` ("text" or "json") at the level
    `verbosity` selects. Calling it again replaces the handler it installed before."""
    formatters = {"text": KlogTextFormatter, "json": KlogJsonFormatter}
    if format not in formatters:
        raise ValueError(f"logging format {format!r}: use text or json")
    root = logging.getLogger()
    for handler in list(root.handlers):
        if getattr(handler, _INSTALLED, False):
            root.removeHandler(handler)
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(formatters[format]())
    setattr(handler, _INSTALLED, True)
    root.addHandler(handler)
    root.setLevel(level_for_verbosity(verbosity))
    for name in _CHATTY:
        logging.getLogger(name).setLevel(logging.NOTSET if verbosity >= 6 else logging.WARNING)
    return handler


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
