"""The error of a wrong command line, --config file or root directory: ConfigurationError,
whose message names the input and the fix; the daemon's main prints it and exits 2."""

from __future__ import annotations

import json
import sys
from typing import Any, NoReturn, TextIO

EXIT_CONFIGURATION_ERROR = 2


class ConfigurationError(Exception):
    """The command line or the --config file is wrong; str(error) says where and how to fix it."""


def exit_on_configuration_error(error: ConfigurationError, stream: TextIO | None = None) -> NoReturn:
    """What the daemon's main does with a ConfigurationError: one line on stderr, exit 2."""
    print(f"pykubelet: {error}", file=stream or sys.stderr)
    raise SystemExit(EXIT_CONFIGURATION_ERROR)


def quote(value: Any) -> str:
    """A value as the messages show it: a string in double quotes (Go's %q), else its repr."""
    return json.dumps(value, ensure_ascii=False) if isinstance(value, str) else repr(value)
