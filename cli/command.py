"""The `pykubelet` command (the console script and bin/pykubelet).

`pykubelet run` starts itself again, once and in the same process (exec), as `python -OO`:
without docstrings and asserts the daemon holds about 2 MB less for its whole life
(docs/performance.md, "110 pods at rest"); nothing in the daemon reads a docstring, and
its asserts only restate what the code already ensures. This module imports nothing
heavy, so the first interpreter costs a few milliseconds before the exec. An operator who
set PYTHONOPTIMIZE, or started the interpreter with -O, keeps that choice.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence

OPTIMIZE = "-OO"


def restart_optimized(
    argv: Sequence[str], optimize: int, environ: Mapping[str, str],
    xoptions: Mapping[str, str | bool] | None = None, warnoptions: Sequence[str] = (),
) -> list[str] | None:
    """The command line to exec for `argv` (sys.argv, its script first), or None to run
    as is: when the command is not `run`, when the interpreter already optimizes or the
    operator chose its level (PYTHONOPTIMIZE), or when argv[0] is not a script file that
    the interpreter can start again (`python -c`, an embedding). The interpreter's -X and
    -W options (sys._xoptions, sys.warnoptions) are given again."""
    if len(argv) < 2 or argv[1] != "run" or optimize or "PYTHONOPTIMIZE" in environ:
        return None
    if not os.path.isfile(argv[0]):
        return None
    x = [f"-X{key}" if value is True else f"-X{key}={value}" for key, value in (xoptions or {}).items()]
    return [sys.executable, OPTIMIZE, *x, *(f"-W{w}" for w in warnoptions), *argv]


def main() -> int:
    again = restart_optimized(sys.argv, sys.flags.optimize, os.environ, sys._xoptions, sys.warnoptions)
    if again is not None:
        os.execv(sys.executable, again)  # does not return: same pid, fds and environment
    from pykubelet.cli.run import main as run

    return run()
