"""write_payload: Go's AtomicWriter on real temporary directories."""

from __future__ import annotations

import os
import re
import stat
import threading

import pytest

from pykubelet.ports.atomic_writer import DATA_DIR, write_payload
from pykubelet.pods.volume_payload import FileProjection

TS_NAME = re.compile(r"^\.\.\d{4}_\d{2}_\d{2}_\d{2}_\d{2}_\d{2}\.\S+$")


def fp(data: bytes | str, mode: int = 0o644, **owner: int) -> FileProjection:
    return FileProjection(data.encode() if isinstance(data, str) else data, mode, **owner)


def ts_dirs(target) -> list[str]:
    return sorted(n for n in os.listdir(target) if TS_NAME.match(n))


def visible(target) -> dict[str, bytes]:
    """What a container sees: every regular file reachable from the user-visible names."""
    out: dict[str, bytes] = {}
    for name in os.listdir(target):
        if name.startswith(".."):
            continue
        for root, _dirs, files in os.walk(os.path.join(target, name), followlinks=True):
            for f in files:
                full = os.path.join(root, f)
                out[os.path.relpath(full, target)] = open(full, "rb").read()
        if os.path.isfile(os.path.join(target, name)):
            out[name] = open(os.path.join(target, name), "rb").read()
    return out


def test_first_write_lays_out_timestamped_dir_data_link_and_visible_links(tmp_path):
    assert write_payload(str(tmp_path), {"a": fp("1"), "dir/b": fp("2"), "dir/sub/c": fp("3")}) is True

    [ts] = ts_dirs(tmp_path)
    assert os.readlink(tmp_path / DATA_DIR) == ts
    assert os.readlink(tmp_path / "a") == "..data/a"
    assert os.readlink(tmp_path / "dir") == "..data/dir"
    assert not os.path.lexists(tmp_path / "..data_tmp")
    assert stat.S_IMODE(os.stat(tmp_path / ts).st_mode) == 0o755
    assert visible(tmp_path) == {"a": b"1", "dir/b": b"2", "dir/sub/c": b"3"}
    assert sorted(os.listdir(tmp_path)) == sorted([DATA_DIR, ts, "a", "dir"])


def test_second_write_swaps_data_link_and_removes_old_timestamped_dir(tmp_path):
    write_payload(str(tmp_path), {"a": fp("1")})
    [old] = ts_dirs(tmp_path)

    assert write_payload(str(tmp_path), {"a": fp("2")}) is True

    [new] = ts_dirs(tmp_path)
    assert new != old
    assert os.readlink(tmp_path / DATA_DIR) == new
    assert (tmp_path / "a").read_bytes() == b"2"


def test_unchanged_payload_writes_nothing(tmp_path):
    payload = {"a": fp("1", 0o600), "d/b": fp(b"\x00\xff")}
    write_payload(str(tmp_path), payload)
    [ts] = ts_dirs(tmp_path)
    inode = os.stat(tmp_path / ts / "a").st_ino

    assert write_payload(str(tmp_path), dict(payload)) is False

    assert ts_dirs(tmp_path) == [ts]
    assert os.stat(tmp_path / ts / "a").st_ino == inode


def test_a_changed_mode_alone_is_rewritten(tmp_path):
    write_payload(str(tmp_path), {"a": fp("1", 0o644)})
    assert write_payload(str(tmp_path), {"a": fp("1", 0o400)}) is True
    assert stat.S_IMODE(os.stat(tmp_path / "a").st_mode) == 0o400


def test_removed_key_loses_its_visible_link(tmp_path):
    write_payload(str(tmp_path), {"a": fp("1"), "b": fp("2"), "d/x": fp("3"), "d/y": fp("4")})

    assert write_payload(str(tmp_path), {"a": fp("1"), "d/x": fp("3")}) is True

    assert not os.path.lexists(tmp_path / "b")
    assert visible(tmp_path) == {"a": b"1", "d/x": b"3"}


def test_nested_directory_dropped_entirely_loses_its_link(tmp_path):
    write_payload(str(tmp_path), {"a": fp("1"), "d/x": fp("3")})
    write_payload(str(tmp_path), {"a": fp("1")})
    assert not os.path.lexists(tmp_path / "d")


def test_a_removed_visible_link_is_restored_without_rewriting_data(tmp_path):
    write_payload(str(tmp_path), {"a": fp("1")})
    [ts] = ts_dirs(tmp_path)
    os.remove(tmp_path / "a")

    assert write_payload(str(tmp_path), {"a": fp("1")}) is True

    assert ts_dirs(tmp_path) == [ts]
    assert (tmp_path / "a").read_bytes() == b"1"


def test_a_stale_data_tmp_link_from_a_killed_writer_is_replaced(tmp_path):
    os.symlink("..gone", tmp_path / "..data_tmp")
    write_payload(str(tmp_path), {"a": fp("1")})
    assert (tmp_path / "a").read_bytes() == b"1"
    assert not os.path.lexists(tmp_path / "..data_tmp")


def test_files_get_exactly_their_mode_whatever_the_umask(tmp_path):
    old = os.umask(0o077)
    try:
        write_payload(str(tmp_path), {"a": fp("1", 0o644), "b": fp("2", 0o400), "d/c": fp("3", 0o777)})
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(tmp_path / "a").st_mode) == 0o644
    assert stat.S_IMODE(os.stat(tmp_path / "b").st_mode) == 0o400
    assert stat.S_IMODE(os.stat(tmp_path / "d/c").st_mode) == 0o777
    assert stat.S_IMODE(os.stat(tmp_path / "d").st_mode) == 0o755


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")
def test_owner_and_fs_group_are_applied_to_files_and_directories(tmp_path):
    write_payload(str(tmp_path), {"t": fp("tok", 0o640, uid=4321, gid=1234), "d/c": fp("x", 0o644, gid=1234)})
    st = os.stat(tmp_path / "t")
    assert (st.st_uid, st.st_gid) == (4321, 1234)
    assert os.stat(tmp_path / "d/c").st_gid == 1234
    d = os.stat(tmp_path / "d")
    assert d.st_gid == 1234 and d.st_mode & stat.S_ISGID


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")
def test_a_changed_owner_alone_is_rewritten(tmp_path):
    write_payload(str(tmp_path), {"a": fp("1", gid=1234)})
    assert write_payload(str(tmp_path), {"a": fp("1", gid=1235)}) is True
    assert os.stat(tmp_path / "a").st_gid == 1235


@pytest.mark.parametrize(
    "path, words",
    [
        ("", "must not be empty"),
        ("/etc/passwd", "must be relative path: /etc/passwd"),
        ("../escape", "must not contain '..': ../escape"),
        ("a/../../b", "must not contain '..': a/../../b"),
        ("..data", "must not start with '..': ..data"),
        ("..2026_01_01/x", "must not start with '..': ..2026_01_01/x"),
        ("x" * 256, "filenames must be less than or equal to 255 characters"),
        ("a/" * 2049, "must be less than or equal to 4096 characters"),
    ],
)
def test_bad_paths_are_refused_before_anything_is_written(tmp_path, path, words):
    with pytest.raises(ValueError, match=re.escape(words)):
        write_payload(str(tmp_path), {"ok": fp("1"), path: fp("2")})
    assert os.listdir(tmp_path) == []


def test_paths_go_allows_are_written(tmp_path):
    # Only the first element may not start with ".."; "." elements are cleaned away.
    write_payload(str(tmp_path), {"a/..b": fp("1"), "./c": fp("2")})
    assert visible(tmp_path) == {"a/..b": b"1", "c": b"2"}


def test_open_files_of_the_old_version_still_read_the_complete_old_set(tmp_path):
    old = {f"k{i}": fp(f"old-{i}") for i in range(5)}
    write_payload(str(tmp_path), old)
    held = {name: open(tmp_path / DATA_DIR / name, "rb") for name in old}
    try:
        write_payload(str(tmp_path), {f"k{i}": fp(f"new-{i}") for i in range(5)})
        assert {name: f.read() for name, f in held.items()} == {n: p.data for n, p in old.items()}
    finally:
        for f in held.values():
            f.close()
    assert (tmp_path / "k0").read_bytes() == b"new-0"


def test_a_reader_never_sees_a_mixture_of_two_versions(tmp_path):
    """A reader resolves ..data once and reads every file under it: whatever it manages to
    read is entirely one version, never half of each."""
    versions = [{f"k{i}": fp(f"{v}-{i}") for i in range(8)} for v in ("A", "B")]
    expected = [{n: p.data for n, p in v.items()} for v in versions]
    write_payload(str(tmp_path), versions[0])
    stop = threading.Event()
    seen: list[dict[str, bytes]] = []

    def reader() -> None:
        while not stop.is_set():
            try:
                ts = os.path.join(tmp_path, os.readlink(tmp_path / DATA_DIR))
                seen.append({n: open(os.path.join(ts, n), "rb").read() for n in sorted(versions[0])})
            except FileNotFoundError:
                continue  # the version it resolved was removed meanwhile: resolve again

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        for i in range(200):
            write_payload(str(tmp_path), versions[(i + 1) % 2])
    finally:
        stop.set()
        thread.join()
    assert seen
    assert all(snapshot in expected for snapshot in seen)
