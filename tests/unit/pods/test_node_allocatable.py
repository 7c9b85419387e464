"""Node allocatable as the Go kubelet computes and validates it (its node_container_manager_linux_test.go
cases): reservations, allocatable, the checks at start, and enforceNodeAllocatable's options."""

from __future__ import annotations

import pytest

from pykubelet.pods.eviction_thresholds import DEFAULT_EVICTION_HARD, parse_thresholds
from pykubelet.pods.node_allocatable import (
    DEFAULT_ENFORCE_NODE_ALLOCATABLE,
    ReservationError,
    allocatable,
    parse_reserved,
    reservation,
    validate_enforce_node_allocatable,
    validate_reservation,
)

MI, GI = 2**20, 2**30


def hard(**signals: str):
    return parse_thresholds({k.replace("_", "."): v for k, v in signals.items()}, {}, {}, {})


def cpu_mem(cpu: str | None, memory: str | None) -> dict[str, str]:
    return {k: v for k, v in (("cpu", cpu), ("memory", memory)) if v is not None}


CAPACITY = {"cpu": 10_000, "memory": 10 * GI}


# --- reservation (Go's TestNodeAllocatableReservationForScheduling) -------------------------


@pytest.mark.parametrize(
    "kube, system, thresholds, capacity, expected",
    [
        (cpu_mem("100m", "100Mi"), cpu_mem("50m", "50Mi"), [], CAPACITY, {"cpu": 150, "memory": 150 * MI}),
        (cpu_mem("100m", "100Mi"), cpu_mem("50m", "50Mi"), hard(memory_available="100Mi"), CAPACITY,
         {"cpu": 150, "memory": 250 * MI}),
        (cpu_mem("100m", "100Mi"), cpu_mem("50m", "50Mi"), hard(memory_available="5%"), CAPACITY,
         {"cpu": 150, "memory": 150 * MI + 536870920}),
        ({}, {}, [], CAPACITY, {}),
        (cpu_mem(None, "100Mi"), cpu_mem("50m", "50Mi"), [], CAPACITY, {"cpu": 50, "memory": 150 * MI}),
        (cpu_mem("50m", "100Mi"), cpu_mem(None, "50Mi"), [], CAPACITY, {"cpu": 50, "memory": 150 * MI}),
        (cpu_mem(None, "100Mi"), cpu_mem(None, "50Mi"), [], {"cpu": 10_000}, {}),
        ({"ephemeral-storage": "100Mi"}, {}, [], {"ephemeral-storage": 10 * GI}, {"ephemeral-storage": 100 * MI}),
        ({"ephemeral-storage": "100Mi"}, {}, hard(nodefs_available="100Mi"), {"ephemeral-storage": 10 * GI},
         {"ephemeral-storage": 200 * MI}),
        ({"ephemeral-storage": "150Mi"}, {}, hard(nodefs_available="5%"), {"ephemeral-storage": 10 * GI},
         {"ephemeral-storage": 694157320}),
    ],
)
def test_reservation(kube, system, thresholds, capacity, expected):
    assert reservation(capacity, kube, system, thresholds) == expected


def test_soft_thresholds_reserve_nothing():
    soft = parse_thresholds({}, {"memory.available": "1Gi"}, {"memory.available": "1m"}, {})
    assert reservation(CAPACITY, {}, {}, soft) == {}


# --- allocatable (Go's TestNodeAllocatableForEnforcement, plus the hard threshold) ------------


@pytest.mark.parametrize(
    "kube, system, capacity, expected",
    [
        (cpu_mem("100m", "100Mi"), cpu_mem("50m", "50Mi"), CAPACITY, {"cpu": 9850, "memory": 10090 * MI}),
        ({}, {}, CAPACITY, CAPACITY),
        (cpu_mem(None, "100Mi"), cpu_mem("50m", "50Mi"), CAPACITY, {"cpu": 9950, "memory": 10090 * MI}),
        (cpu_mem(None, "100Mi"), cpu_mem(None, "50Mi"), {"cpu": 10_000}, {"cpu": 10_000}),
    ],
)
def test_allocatable_is_capacity_less_the_reserves(kube, system, capacity, expected):
    assert allocatable(capacity, kube, system) == expected


def test_allocatable_sets_aside_the_default_hard_thresholds():
    capacity = {"cpu": 4000, "memory": 8 * GI, "ephemeral-storage": 100 * GI, "pods": 110}
    result = allocatable(capacity, {"memory": "1Gi"}, {"cpu": "500m"}, hard(**{k.replace(".", "_"): v for k, v in
                                                                             DEFAULT_EVICTION_HARD.items()}))
    assert result == {"cpu": 3500, "memory": 8 * GI - GI - 100 * MI,
                      "ephemeral-storage": 100 * GI - int(100 * GI * 0.10000000149011612), "pods": 110}  # fmt: skip


def test_allocatable_is_floored_at_zero():
    assert allocatable({"memory": GI}, {"memory": "1Gi"}, {}, hard(memory_available="100Mi")) == {"memory": 0}


def test_hugepages_come_out_of_allocatable_memory():
    capacity = {"memory": 8 * GI, "hugepages-2Mi": 512 * MI, "hugepages-1Gi": 2 * GI}
    assert allocatable(capacity, {}, {})["memory"] == 8 * GI - 512 * MI - 2 * GI


# --- parsing reserves -----------------------------------------------------------------------


def test_reserved_cpu_is_rounded_to_the_nearest_millicore_and_bytes_up():
    assert parse_reserved("kubeReserved", {"cpu": "0.0005", "memory": "0.5", "pid": "1k"}) == {
        "cpu": 1, "memory": 1, "pid": 1000}
    assert parse_reserved("kubeReserved", {"cpu": "1.0004"}) == {"cpu": 1000}


@pytest.mark.parametrize(
    "reserved, words",
    [
        pytest.param({"gpu": "1"}, 'kubeReserved["gpu"]: cannot reserve "gpu"', id="unknown-name"),
        pytest.param({"hugepages-2Mi": "1Gi"}, 'cannot reserve "hugepages-2Mi"', id="hugepages-are-not-reservable"),
        pytest.param({"pods": "10"}, 'cannot reserve "pods"', id="pods-are-not-reservable"),
        pytest.param({"memory": "-1Gi"}, 'kubeReserved["memory"]: "-1Gi" must not be negative', id="negative"),
        pytest.param({"memory": "a lot"}, 'kubeReserved["memory"]: "a lot" is not a quantity', id="not-a-quantity"),
    ],
)
def test_parse_reserved_refuses_what_go_refuses(reserved, words):
    with pytest.raises(ReservationError) as raised:
        parse_reserved("kubeReserved", reserved)
    assert words in str(raised.value)


# --- validation (Go's TestNodeAllocatableInputValidation) -----------------------------------


@pytest.mark.parametrize(
    "kube, system, thresholds, capacity",
    [
        (cpu_mem("100m", "100Mi"), cpu_mem("50m", "50Mi"), [], CAPACITY),
        (cpu_mem("100m", "100Mi"), cpu_mem("50m", "50Mi"), hard(memory_available="100Mi"), CAPACITY),
        (cpu_mem("100m", "100Mi"), cpu_mem("50m", "50Mi"), hard(memory_available="5%"), CAPACITY),
        ({}, {}, [], CAPACITY),
        (cpu_mem(None, "100Mi"), cpu_mem(None, "50Mi"), [], {"cpu": 10_000}),
        ({"ephemeral-storage": "100Mi"}, {}, [], {"ephemeral-storage": 500 * MI}),
        (cpu_mem("5", "5Gi"), cpu_mem("5", "5Gi"), [], CAPACITY),  # exactly the capacity is allowed
    ],
)
def test_reservations_that_fit_are_valid(kube, system, thresholds, capacity):
    validate_reservation(capacity, kube, system, thresholds)


def test_reservations_over_capacity_are_refused_naming_fields_and_figures():
    with pytest.raises(ReservationError) as raised:
        validate_reservation({"cpu": 10_000, "memory": 11 * GI}, cpu_mem("5", "10Gi"), cpu_mem("5", "10Gi"),
                             hard(memory_available="2Gi"))  # fmt: skip
    assert str(raised.value) == (
        'invalid Node Allocatable configuration: memory: kubeReserved["memory"] 10Gi + systemReserved["memory"] 10Gi'
        ' + evictionHard["memory.available"] 2Gi = 22Gi reserved, but the node\'s capacity is 11Gi.'
        " Lower kubeReserved, systemReserved or evictionHard so that they fit the node's capacity")


def test_an_ephemeral_storage_reservation_over_capacity_is_refused():
    with pytest.raises(ReservationError, match=r'ephemeral-storage: kubeReserved\["ephemeral-storage"\] 20Gi \+ '
                                               r'evictionHard\["nodefs.available"\] 100Mi = 20580Mi reserved'):
        validate_reservation({"ephemeral-storage": 20 * GI}, {"ephemeral-storage": "20Gi"}, {},
                             hard(nodefs_available="100Mi"))  # fmt: skip


def test_cpu_figures_are_printed_as_quantities():
    with pytest.raises(ReservationError, match=r'cpu: systemReserved\["cpu"\] 1500m reserved, .* capacity is 1'):
        validate_reservation({"cpu": 1000}, {}, {"cpu": "1.5"})


# --- enforceNodeAllocatable -----------------------------------------------------------------


@pytest.mark.parametrize(
    "values, kwargs, problems",
    [
        pytest.param(list(DEFAULT_ENFORCE_NODE_ALLOCATABLE), {}, [], id="default-pods"),
        pytest.param(["none"], {}, [], id="none"),
        pytest.param(["pods", "system-reserved", "kube-reserved-compressible"],
                     {"system_reserved_cgroup": "/system.slice", "kube_reserved_cgroup": "/kube.slice"}, [],
                     id="with-their-cgroups"),
        pytest.param(["pods", "system-reserved"], {}, ['"system-reserved" needs systemReservedCgroup'],
                     id="system-reserved-without-its-cgroup"),
        pytest.param(["kube-reserved-compressible"], {}, ['"kube-reserved-compressible" needs kubeReservedCgroup'],
                     id="kube-reserved-compressible-without-its-cgroup"),
        pytest.param(["system-reserved", "system-reserved-compressible"], {"system_reserved_cgroup": "/s"},
                     ['"system-reserved" and "system-reserved-compressible" cannot be given together'],
                     id="plain-and-compressible-together"),
        pytest.param(["none", "pods"], {}, ['"none" may not be given with other enforcements'], id="none-with-more"),
        pytest.param(["pods", "pods"], {}, ['"pods" is given twice'], id="duplicate"),
        pytest.param(["Pods"], {}, ['unknown option "Pods"; valid options are "pods", "system-reserved"'],
                     id="unknown-option"),
        pytest.param(["pods"], {"cgroups_per_qos": False}, ['"pods" needs cgroupsPerQOS: true'],
                     id="needs-cgroups-per-qos"),
    ],
)
def test_validate_enforce_node_allocatable(values, kwargs, problems):
    found = validate_enforce_node_allocatable(values, **kwargs)
    assert len(found) == len(problems)
    for problem, words in zip(found, problems):
        assert problem.startswith("enforceNodeAllocatable: ") and words in problem
