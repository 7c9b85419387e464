"""Hypothesis profiles of the fuzz suite, and the count of inputs tried per target.

`ci` (the default): a fixed number of examples, derandomized, so CI is deterministic and
the whole tests/fuzz suite runs in well under a minute. `long` (HYPOTHESIS_PROFILE=long):
random, many examples, for a run of hours. The summary at the end says how many inputs each
target was fed ("fuzz inputs: manifest 1200, ...").
"""

from __future__ import annotations

import os
from datetime import timedelta

from hypothesis import HealthCheck, settings

from .support import input_counts

settings.register_profile(
    "ci",
    max_examples=100,
    derandomize=True,
    database=None,  # nothing carried between runs: CI sees the same examples every time
    deadline=timedelta(seconds=5),  # a hang fails; generous for a loaded 2-CPU machine
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    print_blob=True,
)
settings.register_profile(
    "long",
    max_examples=1_000_000,
    derandomize=False,
    deadline=timedelta(seconds=10),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    print_blob=True,
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    counts = input_counts()
    if counts:
        total = sum(n for n, _ in counts.values())
        shown = ", ".join(f"{target} {n} ({ok} valid)" for target, (n, ok) in sorted(counts.items()))
        terminalreporter.write_line(f"fuzz inputs: {total} in all ({shown})")
