"""klog's V(n) as Python logging levels: V(n) is the level INFO - n, so V(0) is INFO and
V(10) is DEBUG. Every module logs a detail line as log.log(V(4), ...); the daemon's logging
setup (cli/logs.py) turns --v and --vmodule into which of them reach the output."""

from __future__ import annotations

import logging

MAX_VERBOSITY = logging.INFO - logging.DEBUG  # V(10) == DEBUG; anything above logs DEBUG too


def V(verbosity: int) -> int:  # noqa: N802 - the klog name operators and Go readers know
    """The logging level of a klog V(verbosity) line."""
    if not 0 <= verbosity <= MAX_VERBOSITY:
        raise ValueError(f"V({verbosity}): verbosity goes from 0 to {MAX_VERBOSITY}")
    return logging.INFO - verbosity


def verbosity_of(levelno: int) -> int | None:
    """The V of a record's level; None for warnings and errors, which no verbosity hides."""
    if levelno >= logging.WARNING:
        return None
    return min(MAX_VERBOSITY, max(0, logging.INFO - levelno)) if levelno < logging.INFO else 0


for _n in range(1, MAX_VERBOSITY):
    logging.addLevelName(V(_n), f"V{_n}")
