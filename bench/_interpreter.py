"""Which Python a benchmark runs on. Its children and the daemon it starts run on the same
one (sys.executable's), and the figures depend on it: a distribution's build (Debian's
python3, statically linked, optimized with profiles) runs the daemon with probes on
0.76-0.90x the CPU of a plain source build with a shared libpython (pyenv's default) on the
same machine (docs/performance.md, "The interpreter the README installs")."""

from __future__ import annotations

import os
import platform
import sys


def interpreter_line() -> str:
    with open("/proc/self/maps") as maps:  # what this process runs, not what its build could make
        linked = "shared libpython" if "libpython" in maps.read() else "libpython linked in"
    return f"python {platform.python_version()}, {os.path.realpath(sys.executable)} ({linked})"
