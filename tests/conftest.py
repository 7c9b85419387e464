"""Shared fixtures, and the rule that CI must really run the containerd tests.

With CI=true set, a test marked `containerd` that is skipped counts as a failure, and a
session in which no such test passed fails: a green CI means containerd was exercised.
"""

from __future__ import annotations

import os

import pytest

from tests.support.embedded import embedded_cri, embedded_runtime  # noqa: F401 (fixtures)
from tests.support.apiserver.fixtures import apiserver  # noqa: F401 (fixture)
from tests.support.fixtures import *  # noqa: F401,F403

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


@pytest.fixture(scope="session", autouse=True)
def _test_cgroups_removed():
    """Daemons under test keep their pods' cgroups under one root per session
    (tests/support/daemon.py); set up first, this ends last, after every containerd: what
    is left there is removed, and nothing of another session's."""
    from tests.support.daemon import TEST_CGROUP_ROOT, remove_test_cgroups  # before any containerd

    yield
    problem = remove_test_cgroups()
    if problem is not None:
        print(f"\ntest cgroups under {TEST_CGROUP_ROOT} not removed: {problem}")


_containerd_tests_passed = 0


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    global _containerd_tests_passed
    outcome = yield
    report = outcome.get_result()
    if item.get_closest_marker("containerd") is None:
        return
    if report.when == "call" and report.passed:
        _containerd_tests_passed += 1
    if IN_CI and report.skipped:
        report.outcome = "failed"
        report.longrepr = f"CI=true: containerd test skipped, which CI does not allow: {report.longrepr}"


def pytest_sessionfinish(session, exitstatus):
    if IN_CI and _containerd_tests_passed == 0 and exitstatus == 0:
        session.exitstatus = 1
        print("\nCI=true: no test marked containerd passed; the real-containerd tests must run in CI")
