"""glibc malloc, for the daemon's memory at rest: at most two malloc arenas (glibc gives
each thread one, up to 8 a core: the grpc loop, grpc's own threads and the trio workers
that 110 starting pods keep busy), and the free memory that a burst leaves inside malloc's
heaps given back to the system now and then (malloc_trim), as Go's runtime scavenges its
own. Nothing happens where the C library is not glibc.

cli/run.py calls limit_arenas() first thing and runs release_free_memory beside the tree.
"""

from __future__ import annotations

import ctypes
import logging
import os

import trio

log = logging.getLogger("pykubelet.malloc")

ARENAS = 2  # measured against glibc's default and 1 (docs/performance.md, "110 pods at rest")
_M_ARENA_MAX = -8  # mallopt's parameter number (malloc.h)
TRIM_INTERVAL = 10.0  # seconds; one malloc_trim costs 0.02-0.2 ms at rest (docs/performance.md)


def _glibc(name: str):
    try:
        return getattr(ctypes.CDLL(None), name)  # the C library the interpreter is linked with
    except (OSError, AttributeError):  # not glibc (musl has neither malloc_trim nor M_ARENA_MAX)
        return None


_trim, _mallopt = _glibc("malloc_trim"), _glibc("mallopt")


def limit_arenas(count: int = ARENAS) -> bool:
    """At most `count` malloc arenas, unless the operator set MALLOC_ARENA_MAX (then theirs
    stands). Call before threads start. True if the limit was set here."""
    if _mallopt is None or "MALLOC_ARENA_MAX" in os.environ:
        return False
    return bool(_mallopt(_M_ARENA_MAX, count))


def trim() -> bool:
    """Give malloc's free pages back to the system: True if some were, False if none were
    or the C library cannot."""
    return bool(_trim(0)) if _trim is not None else False


async def release_free_memory(interval: float = TRIM_INTERVAL) -> None:
    """trim() every `interval` seconds, for ever."""
    if _trim is None:
        log.info("the C library has no malloc_trim: free memory stays with malloc")
        return
    while True:
        await trio.sleep(interval)
        trim()
