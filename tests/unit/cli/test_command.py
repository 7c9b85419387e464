"""`pykubelet run` starts itself again as python -OO (cli/command.py), unless the operator
chose the optimization level; every other command runs as it was started. The daemon's
own start through the console script is checked end to end in
tests/integration/test_daemon.py."""

from __future__ import annotations

import sys

from pykubelet.cli.command import restart_optimized

SCRIPT = __file__  # any file that exists stands for the console script


def test_run_is_started_again_with_docstrings_and_asserts_left_out():
    assert restart_optimized([SCRIPT, "run", "--v=2"], 0, {}) == [sys.executable, "-OO", SCRIPT, "run", "--v=2"]


def test_the_interpreters_x_and_w_options_are_given_again():
    again = restart_optimized([SCRIPT, "run"], 0, {}, {"faulthandler": True, "importtime": "2"}, ["error"])
    assert again == [sys.executable, "-OO", "-Xfaulthandler", "-Ximporttime=2", "-Werror", SCRIPT, "run"]


def test_once_optimized_it_runs_as_is():
    assert restart_optimized([SCRIPT, "run"], 2, {}) is None


def test_the_operators_choice_of_level_stands():
    assert restart_optimized([SCRIPT, "run"], 1, {}) is None  # python -O
    assert restart_optimized([SCRIPT, "run"], 0, {"PYTHONOPTIMIZE": ""}) is None


def test_other_commands_and_no_script_run_as_is():
    assert restart_optimized([SCRIPT, "--version"], 0, {}) is None
    assert restart_optimized([SCRIPT], 0, {}) is None
    assert restart_optimized(["-c", "run"], 0, {}) is None
