"""Garbage collection decisions: dead containers, sandboxes, pod log directories, images."""

from __future__ import annotations

import pytest

from pykubelet.pods.gc import (
    GcContainer,
    GcImage,
    GcSandbox,
    ImageFsUsage,
    ImageRecord,
    InvalidImageFs,
    containers_to_remove,
    detect_images,
    image_usage_percent,
    images_to_remove,
    pod_dirs_to_remove,
    pod_log_dirs_to_remove,
    sandboxes_to_remove,
)

NOW = 10_000.0


def dead(cid: str, created: float, *, uid: str = "u1", name: str = "app", state: str = "exited",
         finished: float | None = None, managed: bool = True, sandbox: str = "s1") -> GcContainer:
    return GcContainer(id=cid, pod_uid=uid, name=name, state=state, created_at=created, finished_at=finished,
                       managed=managed, sandbox_id=sandbox)


# --- containers -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "containers, kwargs, expected",
    [
        pytest.param([dead("a", 1), dead("b", 2), dead("c", 3)], {}, ["a", "b"],
                     id="keeps-the-newest-dead-one-per-pod-and-name"),
        pytest.param([dead("a", 3), dead("b", 1), dead("c", 2)], {}, ["b", "c"],
                     id="newest-by-creation-not-by-list-order"),
        pytest.param([dead("a", 1), dead("b", 2, name="side")], {}, [],
                     id="one-per-container-name-is-kept"),
        pytest.param([dead("a", 1), dead("b", 2, uid="u2")], {}, [],
                     id="one-per-pod-is-kept"),
        pytest.param([dead("a", 1), dead("b", 2), dead("c", 3)], {"max_per_pod_container": 2}, ["a"],
                     id="max-per-pod-container-2"),
        pytest.param([dead("a", 1), dead("b", 2)], {"max_per_pod_container": -1}, [],
                     id="no-per-pod-limit"),
        pytest.param([dead("a", 1), dead("b", 2)], {"max_per_pod_container": 0}, ["a", "b"],
                     id="max-per-pod-container-0"),
        pytest.param([dead("a", 1, state="running"), dead("b", 2, state="running"), dead("c", 3)], {}, [],
                     id="never-a-running-one"),
        pytest.param([dead("a", 1, state="created"), dead("b", 2, state="unknown"), dead("c", 3)], {}, [],
                     id="only-exited-ones"),
        pytest.param([dead("a", 1, managed=False), dead("b", 2, managed=False), dead("c", 3, managed=False)], {}, [],
                     id="never-an-unmanaged-one"),
        pytest.param([dead("a", 1), dead("b", 2), dead("c", NOW - 10)], {"min_age": 60}, ["a"],
                     id="min-age-keeps-young-ones-out-of-the-count"),
        pytest.param([dead("a", 1, finished=NOW - 10), dead("b", 2), dead("c", 3)], {"min_age": 60}, ["b"],
                     id="min-age-counts-from-the-finish"),
    ],
)
def test_dead_containers_of_existing_pods(containers, kwargs, expected):
    got = containers_to_remove(containers, desired_pod_uids={"u1", "u2"}, now=NOW, **kwargs)
    assert got == expected


def test_deleted_pods_lose_every_dead_container():
    containers = [dead("a", 1), dead("b", 2), dead("c", 3, name="side"), dead("d", 4, uid="u2"),
                  dead("e", 5, uid="gone", state="running")]
    assert containers_to_remove(containers, desired_pod_uids={"u2"}, now=NOW) == ["a", "b", "c"]


def test_before_all_sources_are_seen_no_pod_counts_as_deleted():
    containers = [dead("a", 1), dead("b", 2), dead("c", 3, uid="u2")]
    assert containers_to_remove(containers, desired_pod_uids=None, now=NOW) == ["a"]


def test_max_containers_first_shares_per_unit_then_takes_the_oldest():
    containers = [
        *(dead(f"a{i}", i, name="a") for i in range(1, 5)),  # a1..a4
        *(dead(f"b{i}", 10 + i, name="b") for i in range(1, 3)),  # b1, b2
        dead("c1", 20, name="c"),
    ]
    # 7 dead, no per-pod limit, at most 4: 4 // 3 units = 1 each -> a4, b2, c1 remain.
    got = containers_to_remove(containers, desired_pod_uids={"u1"}, now=NOW, max_per_pod_container=-1, max_containers=4)
    assert sorted(got) == ["a1", "a2", "a3", "b1"]
    # At most 2: one each is still 3, so the oldest of those goes too.
    got = containers_to_remove(containers, desired_pod_uids={"u1"}, now=NOW, max_per_pod_container=-1, max_containers=2)
    assert sorted(got) == ["a1", "a2", "a3", "a4", "b1"]


def test_max_containers_minus_one_is_no_limit():
    containers = [dead(f"x{i}", i, name=f"n{i}") for i in range(5)]
    assert containers_to_remove(containers, desired_pod_uids={"u1"}, now=NOW, max_containers=-1) == []


# --- sandboxes --------------------------------------------------------------------------


def sandbox(sid: str, created: float, *, uid: str = "u1", ready: bool = False, managed: bool = True) -> GcSandbox:
    return GcSandbox(id=sid, pod_uid=uid, ready=ready, created_at=created, managed=managed)


@pytest.mark.parametrize(
    "sandboxes, containers, desired, expected",
    [
        pytest.param([sandbox("s1", 1), sandbox("s2", 2), sandbox("s3", 3)], [], {"u1"}, ["s1", "s2"],
                     id="existing-pod-keeps-its-newest"),
        pytest.param([sandbox("s1", 1), sandbox("s2", 2, ready=True)], [], {"u1"}, ["s1"],
                     id="old-not-ready-goes-beside-a-ready-one"),
        pytest.param([sandbox("s1", 1, ready=True), sandbox("s2", 2)], [], {"u1"}, [],
                     id="never-a-ready-one"),
        pytest.param([sandbox("s1", 1), sandbox("s2", 2)], [dead("c", 1, sandbox="s1")], {"u1"}, [],
                     id="never-one-with-a-container-left"),
        pytest.param([sandbox("s1", 1), sandbox("s2", 2)], [], set(), ["s1", "s2"],
                     id="deleted-pod-loses-all"),
        pytest.param([sandbox("s1", 1), sandbox("s2", 2, ready=True)], [], set(), ["s1"],
                     id="deleted-pod-keeps-a-ready-one"),
        pytest.param([sandbox("s1", 1), sandbox("s2", 2)], [], None, ["s1"],
                     id="sources-not-ready-keeps-the-newest"),
        pytest.param([sandbox("s1", 1, managed=False), sandbox("s2", 2, managed=False)], [], set(), [],
                     id="never-an-unmanaged-one"),
        pytest.param([sandbox("s1", 1), sandbox("t1", 1, uid="u2"), sandbox("t2", 2, uid="u2")], [], {"u1", "u2"},
                     ["t1"], id="per-pod"),
    ],
)
def test_sandboxes(sandboxes, containers, desired, expected):
    assert sandboxes_to_remove(sandboxes, containers, desired_pod_uids=desired) == expected


# --- pod log directories ----------------------------------------------------------------


def test_pod_log_dirs_of_deleted_pods_without_sandboxes_go():
    names = ["default_web_u1", "default_old_u2", "kube-system_dns_u3", "default_alive_u4"]
    got = pod_log_dirs_to_remove(names, desired_pod_uids={"u1"}, live_pod_uids={"u3"})
    assert got == ["default_alive_u4", "default_old_u2"]


def test_pod_log_dirs_stay_until_all_sources_are_seen():
    assert pod_log_dirs_to_remove(["default_old_u2"], desired_pod_uids=None, live_pod_uids=set()) == []


# --- images -----------------------------------------------------------------------------

GIB = 1 << 30


def image(iid: str, size: int = GIB, *, tags: tuple[str, ...] = (), pinned: bool = False) -> GcImage:
    return GcImage(id=iid, size=size, tags=tags, pinned=pinned)


def old(last_used: float = 0.0) -> ImageRecord:
    return ImageRecord(first_seen=0.0, last_used=last_used)


@pytest.mark.parametrize(
    "capacity, available, percent",
    [(100, 100, 0), (100, 15, 85), (100, 16, 84), (100, 0, 100), (100, 150, 0), (3, 1, 67)],
)
def test_usage_percent_as_go_computes_it(capacity, available, percent):
    assert image_usage_percent(ImageFsUsage(capacity=capacity, available=available)) == percent


def test_zero_capacity_is_an_error():
    with pytest.raises(InvalidImageFs, match="invalid capacity 0"):
        images_to_remove([], ImageFsUsage(capacity=0, available=0), set(), {}, NOW)


def test_below_the_high_threshold_nothing_goes():
    images = [image("a")]
    plan = images_to_remove(images, ImageFsUsage(capacity=100 * GIB, available=16 * GIB), set(), {"a": old()}, NOW)
    assert plan.usage_percent == 84 and plan.remove == [] and plan.bytes_to_free == 0


def test_at_the_high_threshold_frees_down_to_the_low_one_least_recently_used_first():
    images = [image("recent"), image("never"), image("older"), image("oldest")]
    records = {"recent": old(900.0), "never": old(), "older": old(500.0), "oldest": old(100.0)}
    fs = ImageFsUsage(capacity=100 * GIB, available=15 * GIB)  # 85%
    plan = images_to_remove(images, fs, set(), records, NOW)
    assert plan.bytes_to_free == 5 * GIB
    assert [i.id for i in plan.candidates] == ["never", "oldest", "older", "recent"]
    fs = ImageFsUsage(capacity=100 * GIB, available=17 * GIB + 1)  # 83%, high 80: free 3 GiB - 1
    plan = images_to_remove(images, fs, set(), records, NOW, high=80, low=80)
    assert plan.remove == ["never", "oldest", "older"]


def test_ties_in_last_use_go_by_first_seen():
    images = [image("b"), image("a")]
    records = {"a": ImageRecord(first_seen=50.0), "b": ImageRecord(first_seen=10.0)}
    plan = images_to_remove(images, ImageFsUsage(capacity=10, available=0), set(), records, NOW, min_age=0)
    assert [i.id for i in plan.candidates] == ["b", "a"]


def test_never_an_image_in_use_pinned_or_too_young():
    images = [
        image("used"), image("by-tag", tags=("localhost/app:1",)), image("pinned", pinned=True),
        image("young"), image("free"),
    ]
    records = {name: old() for name in ("used", "by-tag", "pinned", "free")}
    records["young"] = ImageRecord(first_seen=NOW - 60)
    plan = images_to_remove(
        images, ImageFsUsage(capacity=100, available=0), {"used", "localhost/app:1"}, records, NOW, high=0, low=0
    )
    assert [i.id for i in plan.candidates] == ["free"]
    plan = images_to_remove(
        images, ImageFsUsage(capacity=100, available=0), set(), records, NOW, high=0, low=0, min_age=0
    )
    assert "young" in [i.id for i in plan.candidates] and "pinned" not in [i.id for i in plan.candidates]


def test_high_100_disables_image_gc():
    plan = images_to_remove([image("a")], ImageFsUsage(capacity=100, available=0), set(), {"a": old()}, NOW, high=100)
    assert plan.remove == []


def test_an_image_unknown_to_the_records_counts_as_just_seen():
    plan = images_to_remove([image("new")], ImageFsUsage(capacity=100, available=0), set(), {}, NOW, high=0, low=0)
    assert plan.candidates == []


def test_detect_images_tracks_first_seen_and_last_used():
    records = {"kept": ImageRecord(first_seen=5.0, last_used=6.0), "vanished": ImageRecord(first_seen=1.0)}
    images = [image("kept"), image("new"), image("used", tags=("busybox:1",))]
    got = detect_images(records, images, {"busybox:1"}, 100.0)
    assert got == {
        "kept": ImageRecord(first_seen=5.0, last_used=6.0),
        "new": ImageRecord(first_seen=100.0),
        "used": ImageRecord(first_seen=100.0, last_used=100.0),
    }


def test_pod_dirs_of_pods_gone_with_nothing_in_the_runtime_go():
    uids = ["wanted", "gone", "still-running"]
    assert pod_dirs_to_remove(uids, desired_pod_uids={"wanted"}, live_pod_uids={"still-running"}) == ["gone"]
    assert pod_dirs_to_remove(uids, desired_pod_uids=None, live_pod_uids=set()) == []  # sources not all seen
