"""Container log rotation decisions (Go's container_log_manager.go): when to rotate, the
rotated name, which files to compress and remove, and what a cleanup removes."""

from __future__ import annotations

from datetime import datetime

import pytest

from pykubelet.pods.labels import (
    CONTAINER_NAME_LABEL,
    POD_NAME_LABEL,
    POD_NAMESPACE_LABEL,
    POD_UID_LABEL,
    RESTART_COUNT_ANNOTATION,
)
from pykubelet.pods.log_rotation import (
    LogOwner,
    RotationPlan,
    filter_unused_logs,
    live_restart_counts,
    log_owner,
    logs_to_clean_up,
    needs_rotation,
    plan_rotation,
    rotated_log_name,
)

LOG = "/var/log/pods/ns_web_u1/app/0.log"
NOW = datetime(2024, 3, 5, 7, 8, 9)
NEW = f"{LOG}.20240305-070809"


def r(stamp: str, suffix: str = "") -> str:
    """A rotated file of LOG: r("1") is LOG.20240101-000001."""
    return f"{LOG}.20240101-00000{stamp}{suffix}"


@pytest.mark.parametrize(
    "size, max_size, rotate",
    [
        (10, 10, True),  # Go rotates at the size, not only past it
        (11, 10, True),
        (9, 10, False),
        (0, 0, True),
        (10**9, -1, False),  # negative: rotation off
    ],
)
def test_a_log_is_rotated_once_it_reaches_max_size(size, max_size, rotate):
    assert needs_rotation(size, max_size) is rotate


def test_the_rotated_name_is_the_log_and_gos_timestamp():
    assert rotated_log_name(LOG, NOW) == NEW
    assert rotated_log_name("/l/3.log", datetime(1999, 12, 31, 23, 59, 59)) == "/l/3.log.19991231-235959"


@pytest.mark.parametrize(
    "names, in_use, unused",
    [
        ([], [], []),
        ([r("1", ".gz"), r("2")], [r("1", ".gz"), r("2")], []),
        ([r("1", ".tmp")], [], [r("1", ".tmp")]),  # a compression that never finished
        ([r("1"), r("1", ".gz")], [r("1", ".gz")], [r("1")]),  # compressed, original not removed
        ([r("1", ".gz.tmp"), r("2")], [r("2")], [r("1", ".gz.tmp")]),
    ],
)
def test_unused_logs_are_temporary_files_and_already_compressed_originals(names, in_use, unused):
    assert filter_unused_logs(names) == (in_use, unused)


@pytest.mark.parametrize(
    "rotated, max_files, plan",
    [
        # The first rotation: nothing else to do.
        ([], 5, RotationPlan(rotate_to=NEW)),
        # The previous rotated file is compressed now: only the newest stays plain.
        ([r("1", ".gz"), r("2")], 5, RotationPlan(compress=(r("2"),), rotate_to=NEW)),
        # max_files 5: the current log and the new rotated one leave room for 3 older.
        ([r("1", ".gz"), r("2", ".gz"), r("3", ".gz"), r("4")], 5,
         RotationPlan(remove=(r("1", ".gz"),), compress=(r("4"),), rotate_to=NEW)),
        # max_files 2: every older rotated file goes; nothing to compress.
        ([r("1", ".gz"), r("2")], 2, RotationPlan(remove=(r("1", ".gz"), r("2")), rotate_to=NEW)),
        # Leftovers go first, and do not count as files.
        ([r("1", ".tmp"), r("2"), r("2", ".gz"), r("3")], 4,
         RotationPlan(remove=(r("1", ".tmp"), r("2")), compress=(r("3"),), rotate_to=NEW)),
        # Oldest by name (the timestamp), whatever order the directory gave.
        ([r("3"), r("1", ".gz"), r("2", ".gz")], 3,
         RotationPlan(remove=(r("1", ".gz"), r("2", ".gz")), compress=(r("3"),), rotate_to=NEW)),
        # Rotated in this second already: no second rotation (it would lose the first),
        # and room is kept for one more older file.
        ([r("1", ".gz"), r("2", ".gz"), NEW], 3,
         RotationPlan(remove=(r("1", ".gz"),), compress=(NEW,), rotate_to=None)),
        ([r("1", ".gz"), NEW + ".gz"], 3, RotationPlan(rotate_to=None)),
    ],
)  # fmt: skip
def test_plan_rotation_keeps_at_most_max_files_with_only_the_newest_rotated_plain(rotated, max_files, plan):
    assert plan_rotation(LOG, rotated, max_files=max_files, now=NOW) == plan


@pytest.mark.parametrize("existing", [0, 1, 2, 3, 6, 9])
@pytest.mark.parametrize("max_files", [2, 3, 5])
def test_after_a_rotation_exactly_max_files_or_fewer_exist(existing, max_files):
    rotated = [f"{LOG}.20240101-0000{n:02d}{'.gz' if n < existing - 1 else ''}" for n in range(existing)]
    plan = plan_rotation(LOG, rotated, max_files=max_files, now=NOW)
    after = (set(rotated) - set(plan.remove) - set(plan.compress)) | {f + ".gz" for f in plan.compress} | {NEW, LOG}
    assert len(after) == min(existing + 2, max_files)
    assert [f for f in after if f not in (LOG, NEW) and not f.endswith(".gz")] == []


def test_plan_rotation_refuses_fewer_than_two_files():
    with pytest.raises(ValueError, match="containerLogMaxFiles 1: must be 2 or more"):
        plan_rotation(LOG, [], max_files=1, now=NOW)


@pytest.mark.parametrize(
    "names, live, removed",
    [
        # Attempt 1 runs: its leftovers go, its rotated files stay; attempt 0 is gone.
        (["0.log", "0.log.20240101-000001.gz", "0.log.20240101-000002", "1.log", "1.log.20240101-000003.tmp",
          "1.log.20240101-000004", "1.log.20240101-000004.gz", "1.log.20240101-000005"], {1},
         ["0.log.20240101-000001.gz", "0.log.20240101-000002", "1.log.20240101-000003.tmp",
          "1.log.20240101-000004"]),
        # No container with this directory: every rotated file goes, the logs stay.
        (["0.log", "0.log.20240101-000001.gz", "2.log.20240101-000002"], set(),
         ["0.log.20240101-000001.gz", "2.log.20240101-000002"]),
        # A container of unknown restart count: no attempt counts as gone.
        (["0.log.20240101-000001.gz", "5.log.20240101-000001.tmp"], None, ["5.log.20240101-000001.tmp"]),
        # Files the rotation did not make are never touched.
        (["notes.txt", "0.log.old", "x.log.20240101-000001", "0.log.2024-01-01", "0.log.20240101-000001.bak"],
         set(), []),
    ],
)  # fmt: skip
def test_cleanup_removes_leftovers_and_rotated_files_of_gone_attempts(names, live, removed):
    assert logs_to_clean_up(names, live) == removed


def test_a_containers_log_owner_comes_from_the_kubelets_labels_and_restart_count():
    labels = {POD_NAMESPACE_LABEL: "ns", POD_NAME_LABEL: "web", POD_UID_LABEL: "u1", CONTAINER_NAME_LABEL: "app"}
    assert log_owner(labels, {RESTART_COUNT_ANNOTATION: "3"}) == LogOwner("ns_web_u1", "app", 3)
    assert log_owner(labels, {}) == LogOwner("ns_web_u1", "app", None)
    assert log_owner(labels, {RESTART_COUNT_ANNOTATION: "x"}) == LogOwner("ns_web_u1", "app", None)
    assert log_owner({**labels, POD_UID_LABEL: ""}, {}) is None
    assert log_owner({}, {RESTART_COUNT_ANNOTATION: "0"}) is None


def test_live_restart_counts_group_by_directory_and_an_unknown_count_wins():
    owners = [LogOwner("p", "a", 0), LogOwner("p", "a", 2), LogOwner("p", "b", 1), LogOwner("p", "b", None),
              LogOwner("p", "b", 4), LogOwner("q", "a", 0)]  # fmt: skip
    assert live_restart_counts(owners) == {("p", "a"): {0, 2}, ("p", "b"): None, ("q", "a"): {0}}
