"""What makes a simulated run a function of its seed: the process-wide state a run sets up
and puts back (harness.py runs each schedule inside simulated_process).

The virtual clock for time.time() and for every default argument bound to it; file I/O the
actors hand to threads done inline; Python's global random, UIDs and trio's scheduling coin
seeded; trio's ties (equal deadlines, an Event's waiters, a cancelled scope's tasks) broken
by order instead of memory address; cyclic GC held until the run ends; counting mailboxes.
"""

from __future__ import annotations

import contextlib
import gc
import heapq
import itertools
import logging
import os
import random
import sys
import time
import types
import uuid

import trio

from pykubelet.actors import root as root_module
from pykubelet.actors import runtime_link as runtime_link_module
from pykubelet.pods.backoff import CrashLoopBackOff

from .leaks import counting_mailboxes
from .runtime import EPOCH


async def _inline_to_thread(fn, *args, abandon_on_cancel=None, cancellable=None, limiter=None, **_):
    # File I/O the actors hand to threads, done in place: a thread would let the mock
    # clock jump while it runs, and the run would no longer be a function of the seed.
    await trio.lowlevel.checkpoint()
    return fn(*args)


@contextlib.contextmanager
def simulated_process(seed: int):
    real_time, real_time_ns = time.time, time.time_ns
    saved_cri = runtime_link_module.CriClient
    saved_api = root_module.ApiClient
    saved_uuid4 = uuid.uuid4
    uuid_rng = random.Random(seed * 7 + 3)
    saved_backoff = root_module.CrashLoopBackOff
    saved_thread = trio.to_thread.run_sync
    saved_random = random.getstate()
    trio_rng = trio._core._run._r
    saved_trio_rng = trio_rng.getstate()

    def virtual_time() -> float:
        try:
            return EPOCH + trio.current_time()
        except RuntimeError:
            return real_time()

    def virtual_time_ns() -> int:
        return int(virtual_time() * 1e9)

    time.time, time.time_ns = virtual_time, virtual_time_ns
    # The crash-loop back-off binds its clock at definition time: give it the virtual one.
    root_module.CrashLoopBackOff = lambda: CrashLoopBackOff(clock=virtual_time)
    # So do others (the event recorder, GC, node status, the lease...): a default argument
    # bound to the real time.time is given the virtual clock while the simulation runs.
    clock_defaults = _rebind_clock_defaults(real_time, virtual_time)
    trio.to_thread.run_sync = _inline_to_thread
    # UIDs (the simulated API server's) order sets and dicts: drawn from the seed.
    uuid.uuid4 = lambda: uuid.UUID(int=uuid_rng.getrandbits(128), version=4)
    random.seed(seed)
    trio_rng.seed(seed)
    pykubelet_log = logging.getLogger("pykubelet")
    saved_level, saved_propagate = pykubelet_log.level, pykubelet_log.propagate
    if os.environ.get("SIM_LOG"):  # e.g. SIM_LOG=INFO: the daemon's log, on virtual time
        logging.basicConfig(level=os.environ["SIM_LOG"], format="%(relativeCreated)d %(name)s %(levelname)s %(message)s")
    else:
        pykubelet_log.setLevel(logging.ERROR)
        pykubelet_log.propagate = False
    # Cyclic garbage collection runs when allocations say so, and what it finalizes (an
    # async generator httpx left suspended) schedules work: off during a run, so that the
    # run is a function of the seed; collected after it.
    # trio breaks a tie of two deadlines by the cancel scopes' id(), a memory address: on
    # a mock clock ties are common (two sleeps of 10 s begun at one instant), so ties go
    # by the order the deadlines were set instead.
    saved_add = trio._core._run.Deadlines.add
    order = itertools.count()

    def add_in_order(self, deadline, cancel_scope) -> None:
        heapq.heappush(self._heap, (deadline, next(order), cancel_scope))
        self._active += 1

    trio._core._run.Deadlines.add = add_in_order
    # So does a cancelled scope wake its tasks, and its child scopes, in set order (by
    # identity): in the order they joined it instead.
    cancel_status = trio._core._run.CancelStatus
    saved_post_init = cancel_status.__attrs_post_init__

    def ordered_post_init(self) -> None:
        self._children, self._tasks = _OrderedSet(), _OrderedSet()
        saved_post_init(self)

    cancel_status.__attrs_post_init__ = ordered_post_init
    # And trio.Event wakes its waiters in set order: in the order the tasks were made.
    saved_event_set = trio.Event.set

    def set_in_order(self) -> None:
        if not self._flag:
            self._flag = True
            for task in sorted(self._tasks, key=lambda t: t._counter):
                trio.lowlevel.reschedule(task)
            self._tasks.clear()

    trio.Event.set = set_in_order
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        with counting_mailboxes():
            yield
    finally:
        trio._core._run.Deadlines.add = saved_add
        cancel_status.__attrs_post_init__ = saved_post_init
        trio.Event.set = saved_event_set
        if gc_was_enabled:
            gc.enable()
        gc.collect(0)  # everything the run made is in the youngest generation: cheap
        time.time, time.time_ns = real_time, real_time_ns
        for function, defaults, kwdefaults in clock_defaults:
            function.__defaults__, function.__kwdefaults__ = defaults, kwdefaults
        runtime_link_module.CriClient = saved_cri
        root_module.ApiClient = saved_api
        uuid.uuid4 = saved_uuid4
        root_module.CrashLoopBackOff = saved_backoff
        trio.to_thread.run_sync = saved_thread
        random.setstate(saved_random)
        trio_rng.setstate(saved_trio_rng)
        pykubelet_log.setLevel(saved_level)
        pykubelet_log.propagate = saved_propagate


class _OrderedSet(dict):
    """The part of set that trio's CancelStatus uses, iterated in insertion order."""

    def add(self, item) -> None:
        self[item] = None

    def remove(self, item) -> None:
        del self[item]

    def discard(self, item) -> None:
        self.pop(item, None)


def _rebind_clock_defaults(real, virtual) -> list[tuple]:
    """Every pykubelet function or method whose default argument is `real` gets `virtual`
    instead; returns what to restore."""
    changed = []
    for name, module in list(sys.modules.items()):
        if not name.startswith("pykubelet") or module is None:
            continue
        for value in list(vars(module).values()):
            candidates = [value] + (list(vars(value).values()) if isinstance(value, type) else [])
            for function in candidates:
                if not isinstance(function, types.FunctionType) or function.__module__ != name:
                    continue
                defaults, kwdefaults = function.__defaults__, function.__kwdefaults__
                uses_real = any(d is real for d in defaults or ()) or any(d is real for d in (kwdefaults or {}).values())
                if uses_real:
                    changed.append((function, defaults, kwdefaults))
                    if defaults:
                        function.__defaults__ = tuple(virtual if d is real else d for d in defaults)
                    if kwdefaults:
                        function.__kwdefaults__ = {k: virtual if d is real else d for k, d in kwdefaults.items()}
    return changed
