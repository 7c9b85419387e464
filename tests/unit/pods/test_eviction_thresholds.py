"""Eviction thresholds as the Go kubelet's helpers.go has them: parsing and validation (Go's
TestParseThresholdConfig cases), thresholds met, grace periods, node conditions and the pressure
transition period, node-level reclaim, and Go's quantity printing."""

from __future__ import annotations

from decimal import Decimal

import pytest

from pykubelet.pods.eviction_thresholds import (
    DEFAULT_EVICTION_HARD,
    NodeReclaim,
    Observation,
    Quantity,
    QuantityFormat,
    Signal,
    Threshold,
    ThresholdError,
    ThresholdValue,
    format_quantity,
    merge_thresholds,
    node_conditions,
    node_conditions_last_observed,
    node_conditions_observed_since,
    node_reclaim_functions,
    parse_thresholds,
    sort_by_eviction_priority,
    threshold_quantity,
    thresholds_first_observed,
    thresholds_met,
    thresholds_met_grace_period,
    thresholds_with_new_stats,
    with_container_fs_thresholds,
)

MEM, NODEFS, IMAGEFS = Signal.MEMORY_AVAILABLE, Signal.NODEFS_AVAILABLE, Signal.IMAGEFS_AVAILABLE
NODEFS_INODES, IMAGEFS_INODES = Signal.NODEFS_INODES_FREE, Signal.IMAGEFS_INODES_FREE
MI, GI = 2**20, 2**30


def q(text: str) -> ThresholdValue:
    return ThresholdValue(quantity=Quantity.parse(text))


def pct(value: float) -> ThresholdValue:
    return ThresholdValue(percentage=value)


def t(signal: Signal, value: ThresholdValue, grace: float = 0.0, reclaim: ThresholdValue | None = None) -> Threshold:
    return Threshold(signal, value, grace, reclaim)


# --- parsing (Go's TestParseThresholdConfig) ------------------------------------------------


@pytest.mark.parametrize(
    "hard, soft, grace, reclaim, enforce, expected",
    [
        pytest.param({}, {}, {}, {}, (), [], id="no-values"),
        pytest.param({"memory.available": "150Mi"}, {"memory.available": "300Mi"}, {"memory.available": "30s"},
                     {"memory.available": "0"}, ("pods",),
                     [t(MEM, q("150Mi"), reclaim=q("0")), t(MEM, q("300Mi"), 30, q("0")),
                      t(Signal.ALLOCATABLE_MEMORY_AVAILABLE, q("150Mi"), reclaim=q("0"))],
                     id="all-memory-eviction-values"),
        pytest.param({"memory.available": "10%"}, {"memory.available": "30%"}, {"memory.available": "30s"},
                     {"memory.available": "5%"}, (),
                     [t(MEM, pct(0.1), reclaim=pct(0.05)), t(MEM, pct(0.3), 30, pct(0.05))],
                     id="all-memory-eviction-values-in-percentages"),
        pytest.param({"imagefs.available": "150Mi", "nodefs.available": "100Mi"},
                     {"imagefs.available": "300Mi", "nodefs.available": "200Mi"},
                     {"imagefs.available": "30s", "nodefs.available": "30s"},
                     {"imagefs.available": "2Gi", "nodefs.available": "1Gi"}, (),
                     [t(IMAGEFS, q("150Mi"), reclaim=q("2Gi")), t(NODEFS, q("100Mi"), reclaim=q("1Gi")),
                      t(IMAGEFS, q("300Mi"), 30, q("2Gi")), t(NODEFS, q("200Mi"), 30, q("1Gi"))],
                     id="disk-eviction-values"),
        pytest.param({"imagefs.available": "15%", "nodefs.available": "10.5%"},
                     {"imagefs.available": "30%", "nodefs.available": "20.5%"},
                     {"imagefs.available": "30s", "nodefs.available": "30s"},
                     {"imagefs.available": "10%", "nodefs.available": "5%"}, (),
                     [t(IMAGEFS, pct(0.15), reclaim=pct(0.1)), t(NODEFS, pct(0.105), reclaim=pct(0.05)),
                      t(IMAGEFS, pct(0.3), 30, pct(0.1)), t(NODEFS, pct(0.205), 30, pct(0.05))],
                     id="disk-eviction-values-in-percentages"),
        pytest.param({"imagefs.inodesFree": "150Mi", "nodefs.inodesFree": "100Mi"},
                     {"imagefs.inodesFree": "300Mi", "nodefs.inodesFree": "200Mi"},
                     {"imagefs.inodesFree": "30s", "nodefs.inodesFree": "30s"},
                     {"imagefs.inodesFree": "2Gi", "nodefs.inodesFree": "1Gi"}, (),
                     [t(IMAGEFS_INODES, q("150Mi"), reclaim=q("2Gi")), t(NODEFS_INODES, q("100Mi"), reclaim=q("1Gi")),
                      t(IMAGEFS_INODES, q("300Mi"), 30, q("2Gi")), t(NODEFS_INODES, q("200Mi"), 30, q("1Gi"))],
                     id="inode-eviction-values"),
        pytest.param({"memory.available": "0%"}, {"memory.available": "0%"}, {}, {}, (), [], id="disable-via-0%"),
        pytest.param({"memory.available": "100%"}, {"memory.available": "100%"}, {}, {}, (), [],
                     id="disable-via-100%"),
        pytest.param({"pid.available": "1k"}, {}, {}, {}, (), [t(Signal.PID_AVAILABLE, q("1k"))], id="pid"),
    ],
)
def test_parse_thresholds_as_go(hard, soft, grace, reclaim, enforce, expected):
    assert parse_thresholds(hard, soft, grace, reclaim, enforce_node_allocatable=enforce) == expected


@pytest.mark.parametrize(
    "hard, soft, grace, reclaim, field, words",
    [
        pytest.param({"mem.available": "150Mi"}, {}, {}, {}, 'evictionHard["mem.available"]',
                     "unsupported eviction signal", id="invalid-signal"),
        pytest.param({"memory.available": "-150Mi"}, {}, {}, {}, 'evictionHard["memory.available"]',
                     "must be positive", id="hard-signal-negative"),
        pytest.param({"memory.available": "0"}, {}, {}, {}, 'evictionHard["memory.available"]',
                     '"0%" to switch it off', id="hard-signal-zero"),
        pytest.param({"memory.available": "-15%"}, {}, {}, {}, 'evictionHard["memory.available"]',
                     "at least 0%", id="hard-signal-negative-percentage"),
        pytest.param({"memory.available": "150%"}, {}, {}, {}, 'evictionHard["memory.available"]',
                     "at most 100%", id="hard-signal-percentage-greater-than-100%"),
        pytest.param({"memory.available": "lots"}, {}, {}, {}, 'evictionHard["memory.available"]',
                     "not a quantity", id="hard-signal-not-a-quantity"),
        pytest.param({"memory.available": "ten%"}, {}, {}, {}, 'evictionHard["memory.available"]',
                     "not a percentage", id="hard-signal-not-a-percentage"),
        pytest.param({}, {"memory.available": "-150Mi"}, {}, {}, 'evictionSoft["memory.available"]',
                     "must be positive", id="soft-signal-negative"),
        pytest.param({"memory.available": "150Mi", "invalid.foo": "150Mi"}, {}, {}, {}, 'evictionHard["invalid.foo"]',
                     "unsupported eviction signal", id="valid-and-invalid-signal"),
        pytest.param({}, {"memory.available": "150Mi"}, {}, {}, 'evictionSoft["memory.available"]',
                     'add evictionSoftGracePeriod["memory.available"]', id="soft-no-grace-period"),
        pytest.param({}, {"memory.available": "150Mi"}, {"memory.available": "-30s"}, {},
                     'evictionSoftGracePeriod["memory.available"]', "must not be negative",
                     id="soft-negative-grace-period"),
        pytest.param({}, {}, {"memory.available": "soon"}, {}, 'evictionSoftGracePeriod["memory.available"]',
                     "invalid duration", id="grace-period-not-a-duration"),
        pytest.param({}, {}, {}, {"memory.available": "-300Mi"}, 'evictionMinimumReclaim["memory.available"]',
                     "must not be negative", id="negative-reclaim"),
        pytest.param({}, {}, {}, {"memory.available": "0%"}, 'evictionMinimumReclaim["memory.available"]',
                     "must be positive", id="zero-percent-reclaim"),
    ],
)
def test_parse_thresholds_refuses_what_go_refuses_naming_the_field(hard, soft, grace, reclaim, field, words):
    with pytest.raises(ThresholdError) as raised:
        parse_thresholds(hard, soft, grace, reclaim)
    assert raised.value.field == field
    assert str(raised.value).startswith(f"{field}: ")
    assert words in str(raised.value)


def test_a_percentage_is_kept_as_go_keeps_it_in_a_float32():
    [threshold] = parse_thresholds({"nodefs.available": "10%"}, {}, {}, {})
    assert threshold.value.percentage == 0.10000000149011612
    # and so 10% of 1000Gi is not quite 100Gi, as in Go
    assert threshold_quantity(threshold.value, 1000 * GI).value == 107374184000


def test_a_soft_grace_period_of_zero_makes_the_threshold_hard_as_in_go():
    [threshold] = parse_thresholds({}, {"memory.available": "1Gi"}, {"memory.available": "0s"}, {})
    assert threshold.hard


# --- defaults -----------------------------------------------------------------------------


def test_default_eviction_hard_is_gos_linux_defaults():
    assert DEFAULT_EVICTION_HARD == {"memory.available": "100Mi", "nodefs.available": "10%",
                                     "nodefs.inodesFree": "5%", "imagefs.available": "15%",
                                     "imagefs.inodesFree": "5%"}  # fmt: skip


# --- Go's quantity printing ---------------------------------------------------------------


@pytest.mark.parametrize(
    "value, fmt, expected",
    [
        (100 * MI, QuantityFormat.BINARY_SI, "100Mi"),
        (1000 * MI, QuantityFormat.BINARY_SI, "1000Mi"),
        (50 * MI, QuantityFormat.BINARY_SI, "50Mi"),
        (12536420 * 1024, QuantityFormat.BINARY_SI, "12536420Ki"),
        (1536, QuantityFormat.BINARY_SI, "1536"),
        (500, QuantityFormat.BINARY_SI, "500"),
        (1000, QuantityFormat.BINARY_SI, "1k"),  # under 1024, a binary quantity prints as decimal
        (0, QuantityFormat.BINARY_SI, "0"),
        (128_000_000, QuantityFormat.DECIMAL_SI, "128M"),
        (Decimal("1.5"), QuantityFormat.DECIMAL_SI, "1500m"),
        (1500, QuantityFormat.DECIMAL_SI, "1500"),
        (1000, QuantityFormat.DECIMAL_EXPONENT, "1e3"),
    ],
)
def test_format_quantity_prints_as_go(value, fmt, expected):
    assert format_quantity(value, fmt) == expected


@pytest.mark.parametrize("text, expected", [("100Mi", "100Mi"), ("1024Mi", "1Gi"), ("0.5Gi", "512Mi"),
                                            ("128M", "128M"), ("100m", "100m"), ("1e3", "1e3")])  # fmt: skip
def test_a_parsed_quantity_prints_in_its_own_format(text, expected):
    assert str(Quantity.parse(text)) == expected


# --- thresholds met -----------------------------------------------------------------------

HARD_1GI = t(MEM, q("1Gi"), reclaim=q("500Mi"))


@pytest.mark.parametrize(
    "available, enforce_min_reclaim, met",
    [
        pytest.param("500Mi", False, True, id="threshold-met-memory"),
        pytest.param("2Gi", False, False, id="threshold-not-met"),
        pytest.param("1.05Gi", True, True, id="threshold-met-with-min-reclaim"),
        pytest.param("2Gi", True, False, id="threshold-not-met-with-min-reclaim"),
        pytest.param("1Gi", False, False, id="exactly-the-threshold-is-not-met"),
    ],
)
def test_thresholds_met(available, enforce_min_reclaim, met):
    observed = {MEM: Observation(available=int(Quantity.parse(available).value), capacity=8 * GI)}
    assert thresholds_met([HARD_1GI], observed, enforce_min_reclaim) == ([HARD_1GI] if met else [])


PERCENT_MEM = t(MEM, pct(0.2), reclaim=pct(0.05))
PERCENT_NODEFS = t(NODEFS, pct(0.3))


@pytest.mark.parametrize(
    "observations, enforce, expected",
    [
        pytest.param({MEM: (100, 1000), NODEFS: (100, 1000)}, False, [PERCENT_MEM, PERCENT_NODEFS], id="BothMet"),
        pytest.param({MEM: (300, 1000), NODEFS: (400, 1000)}, False, [], id="NoneMet"),
        pytest.param({MEM: (300, 1000), NODEFS: (100, 1000)}, False, [PERCENT_NODEFS], id="DiskMet"),
        pytest.param({MEM: (100, 1000), NODEFS: (400, 1000)}, False, [PERCENT_MEM], id="MemoryMet"),
        pytest.param({MEM: (225, 1000)}, True, [PERCENT_MEM], id="MemoryMetWithMinReclaim"),
        pytest.param({MEM: (300, 1000)}, True, [], id="MemoryNotMetWithMinReclaim"),
    ],
)
def test_percentage_thresholds_met(observations, enforce, expected):
    observed = {signal: Observation(free * MI, capacity * MI) for signal, (free, capacity) in observations.items()}
    assert thresholds_met([PERCENT_MEM, PERCENT_NODEFS], observed, enforce) == expected


def test_a_threshold_without_an_observation_is_not_met():
    assert thresholds_met([HARD_1GI], {}, False) == []


def test_merge_thresholds_adds_the_unresolved_ones_not_already_met():
    soft = t(MEM, q("2Gi"), 60)
    assert merge_thresholds([HARD_1GI], [HARD_1GI, soft]) == [HARD_1GI, soft]


@pytest.mark.parametrize(
    "observed_at, last_at, kept",
    [
        pytest.param(None, None, True, id="no-time"),
        pytest.param(100.0, None, True, id="no-last-observation"),
        pytest.param(100.0, 160.0, False, id="time-machine"),
        pytest.param(100.0, 100.0, False, id="same-observation"),
        pytest.param(160.0, 100.0, True, id="new-observation"),
    ],
)
def test_thresholds_with_new_stats(observed_at, last_at, kept):
    now = {MEM: Observation(0, 0, observed_at)}
    last = {} if last_at is None else {MEM: Observation(0, 0, last_at)}
    assert thresholds_with_new_stats([HARD_1GI], now, last) == ([HARD_1GI] if kept else [])


# --- grace periods ------------------------------------------------------------------------

NOW = 1000.0
SOFT_2GI = t(MEM, q("2Gi"), grace=60)


def test_a_threshold_met_first_now_is_observed_now_and_an_older_one_keeps_its_time():
    assert thresholds_first_observed([HARD_1GI], {}, NOW) == {HARD_1GI: NOW}
    assert thresholds_first_observed([HARD_1GI], {HARD_1GI: NOW - 60}, NOW) == {HARD_1GI: NOW - 60}
    assert thresholds_first_observed([], {HARD_1GI: NOW - 60}, NOW) == {}


@pytest.mark.parametrize(
    "observed_at, expected",
    [
        pytest.param({}, [], id="empty"),
        pytest.param({HARD_1GI: NOW}, [HARD_1GI], id="hard-threshold-met"),
        pytest.param({SOFT_2GI: NOW}, [], id="soft-threshold-not-met"),
        pytest.param({SOFT_2GI: NOW - 120}, [SOFT_2GI], id="soft-threshold-met"),
        pytest.param({SOFT_2GI: NOW - 60}, [SOFT_2GI], id="soft-threshold-met-at-exactly-its-grace-period"),
    ],
)
def test_thresholds_met_grace_period(observed_at, expected):
    assert thresholds_met_grace_period(observed_at, NOW) == expected


# --- node conditions ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "signals, expected",
    [
        ([], set()),
        ([MEM], {"MemoryPressure"}),
        ([Signal.ALLOCATABLE_MEMORY_AVAILABLE], {"MemoryPressure"}),
        ([NODEFS, IMAGEFS_INODES, Signal.CONTAINERFS_AVAILABLE], {"DiskPressure"}),
        ([Signal.PID_AVAILABLE, MEM], {"PIDPressure", "MemoryPressure"}),
    ],
)
def test_node_conditions(signals, expected):
    assert node_conditions([t(s, q("1")) for s in signals]) == expected


def test_node_conditions_last_observed_moves_the_ones_seen_now_and_keeps_the_others():
    assert node_conditions_last_observed(["MemoryPressure"], {}, NOW) == {"MemoryPressure": NOW}
    earlier = {"MemoryPressure": NOW - 60}
    assert node_conditions_last_observed(["MemoryPressure"], earlier, NOW) == {"MemoryPressure": NOW}
    assert node_conditions_last_observed([], {"MemoryPressure": NOW - 60}, NOW) == {"MemoryPressure": NOW - 60}


@pytest.mark.parametrize("period, expected", [pytest.param(120, {"MemoryPressure"}, id="in-period"),
                                              pytest.param(30, set(), id="out-of-period"),
                                              pytest.param(60, set(), id="exactly-the-period-is-out")])  # fmt: skip
def test_a_condition_stays_until_unseen_for_the_transition_period(period, expected):
    assert node_conditions_observed_since({"MemoryPressure": NOW - 60}, period, NOW) == expected


# --- order and reclaim --------------------------------------------------------------------


@pytest.mark.parametrize("memory", [MEM, Signal.ALLOCATABLE_MEMORY_AVAILABLE])
def test_memory_is_reclaimed_before_anything_else(memory):
    given = [t(NODEFS, q("1")), t(Signal.PID_AVAILABLE, q("1")), t(memory, q("1"))]
    assert [x.signal for x in sort_by_eviction_priority(given)] == [memory, NODEFS, Signal.PID_AVAILABLE]


CONTAINERS, IMAGES = NodeReclaim.DELETE_ALL_UNUSED_CONTAINERS, NodeReclaim.DELETE_UNUSED_IMAGES


@pytest.mark.parametrize(
    "signal, dedicated, split, expected",
    [
        pytest.param(NODEFS, False, False, (CONTAINERS, IMAGES), id="one-fs-nodefs-dead-containers-then-images"),
        pytest.param(IMAGEFS_INODES, False, False, (CONTAINERS, IMAGES), id="one-fs-imagefs"),
        pytest.param(NODEFS, True, False, (), id="imagefs-apart-nodefs-holds-logs-and-volumes-only"),
        pytest.param(IMAGEFS, True, False, (CONTAINERS, IMAGES), id="imagefs-apart-imagefs"),
        pytest.param(Signal.CONTAINERFS_AVAILABLE, True, False, (CONTAINERS, IMAGES), id="imagefs-apart-containerfs"),
        pytest.param(IMAGEFS, True, True, (IMAGES,), id="split-imagefs-images-only"),
        pytest.param(NODEFS, True, True, (CONTAINERS,), id="split-nodefs-containers-only"),
        pytest.param(MEM, False, False, (), id="memory-has-no-node-reclaim"),
        pytest.param(Signal.PID_AVAILABLE, True, True, (), id="pids-have-no-node-reclaim"),
    ],
)
def test_node_reclaim_functions(signal, dedicated, split, expected):
    assert node_reclaim_functions(signal, dedicated_image_fs=dedicated, split_container_image_fs=split) == expected


def test_containerfs_thresholds_copy_nodefs_on_one_filesystem_and_ignore_the_users():
    given = parse_thresholds({"nodefs.available": "10%", "containerfs.available": "1Gi"},
                             {"nodefs.available": "20%"}, {"nodefs.available": "1m"}, {})  # fmt: skip
    thresholds, warnings = with_container_fs_thresholds(given, dedicated_image_fs=False)
    assert warnings == ["found containerfs.available for hard eviction. ignoring"]
    assert [(x.signal, x.value, x.grace_period) for x in thresholds if x.signal == Signal.CONTAINERFS_AVAILABLE] == [
        (Signal.CONTAINERFS_AVAILABLE, pct(0.1), 0.0), (Signal.CONTAINERFS_AVAILABLE, pct(0.2), 60.0)]


def test_containerfs_thresholds_copy_imagefs_when_images_and_layers_share_their_own_disk():
    thresholds, _ = with_container_fs_thresholds(parse_thresholds(DEFAULT_EVICTION_HARD, {}, {}, {}),
                                                 dedicated_image_fs=True)  # fmt: skip
    derived = {x.signal: x.value for x in thresholds if x.signal.value.startswith("containerfs")}
    assert derived == {Signal.CONTAINERFS_AVAILABLE: pct(0.15), Signal.CONTAINERFS_INODES_FREE: pct(0.05)}
