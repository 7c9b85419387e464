"""glibc's malloc_trim, called now and then: free memory goes back to the system, and a C
library without it is left alone."""

from __future__ import annotations

import logging

import trio

from pykubelet.ports import malloc


def rss_kb() -> int:
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))


def test_trim_gives_the_free_memory_inside_mallocs_heap_back_to_the_system():
    assert malloc._trim is not None  # this machine's Python runs on glibc
    blocks = [bytes(4000) for _ in range(16_000)]  # 64 MB from malloc's heap (above obmalloc's 512 bytes)
    kept = blocks[::8]  # one in eight stays: the free space is inside the heap, not at its top
    del blocks
    before = rss_kb()
    assert malloc.trim() is True
    assert before - rss_kb() > 20_000  # kB: most of the 56 MB freed inside the heap
    assert len(kept) == 2000


async def test_free_memory_is_released_every_interval(monkeypatch, autojump_clock):
    calls: list[float] = []
    monkeypatch.setattr(malloc, "_trim", lambda pad: calls.append(trio.current_time()) or 1)
    with trio.move_on_after(35):
        await malloc.release_free_memory(10)
    assert calls == [10, 20, 30]


async def test_without_malloc_trim_nothing_is_called_and_the_task_ends(monkeypatch, caplog, autojump_clock):
    monkeypatch.setattr(malloc, "_trim", None)
    caplog.set_level(logging.INFO, logger="pykubelet.malloc")
    with trio.fail_after(1):
        await malloc.release_free_memory(10)
    assert malloc.trim() is False
    assert "no malloc_trim" in caplog.text


def test_the_arena_limit_is_set_unless_the_operator_set_malloc_arena_max(monkeypatch):
    calls: list[tuple[int, int]] = []
    monkeypatch.setattr(malloc, "_mallopt", lambda param, value: calls.append((param, value)) or 1)
    monkeypatch.delenv("MALLOC_ARENA_MAX", raising=False)
    assert malloc.limit_arenas() is True
    assert calls == [(-8, 2)]  # M_ARENA_MAX
    monkeypatch.setenv("MALLOC_ARENA_MAX", "4")
    assert malloc.limit_arenas() is False
    assert calls == [(-8, 2)]
    monkeypatch.setattr(malloc, "_mallopt", None)  # not glibc
    monkeypatch.delenv("MALLOC_ARENA_MAX")
    assert malloc.limit_arenas() is False


def test_glibcs_mallopt_takes_the_arena_limit():
    assert malloc._mallopt is not None and malloc._mallopt(-8, 2) == 1  # 1: success, as malloc.h says
