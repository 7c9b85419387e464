"""Helpers of the fuzz suite: the per-target count of inputs tried, and of those that gave
a valid result rather than the parser's typed error (so a target that only ever errors
shows up in the summary)."""

from __future__ import annotations

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
