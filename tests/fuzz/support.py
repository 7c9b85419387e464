"""Helpers of the fuzz suite: the per-target count of inputs tried, and of those that gave
a valid result rather than the parser's typed error (so a target that only ever errors
shows up in the summary); a scratch folder per target that outlives every example."""

from __future__ import annotations

import atexit
import shutil
import tempfile
from collections import Counter

_TRIED: Counter[str] = Counter()
_VALID: Counter[str] = Counter()


def tried(target: str) -> None:
    """Count one input fed to `target` (the conftest prints the totals)."""
    _TRIED[target] += 1


def valid(target: str) -> None:
    """Count one input of `target` that gave a valid result."""
    _VALID[target] += 1


def input_counts() -> dict[str, tuple[int, int]]:
    """{target: (inputs tried, valid results)}."""
    return {target: (n, _VALID[target]) for target, n in _TRIED.items()}


def scratch_directory(prefix: str) -> str:
    """A temp folder for one target's files, removed when the test process ends (hypothesis
    runs every example of a test in one function call, where a fixture's folder would be
    shared anyway)."""
    path = tempfile.mkdtemp(prefix=prefix)
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path
