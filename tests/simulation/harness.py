"""Runs the real actor tree (Daemon, supervisor, pure decisions) on trio's MockClock with a
simulated runtime and a real manifest directory, plays a Schedule, and checks invariants.

Determinism: one seed fixes the schedule, every latency of the simulated runtime, Python's
global `random` (the pod workers' resync jitter) and trio's own scheduling coin; file I/O
that the actors hand to threads runs inline; time.time() follows the virtual clock (the
crash-loop back-off compares it with container finish times). String hashing is the
process's own: replay with the same PYTHONHASHSEED the failing run printed.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import random
import shutil
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field

import trio
import trio.testing

from pykubelet.actors import root as root_module
from pykubelet.actors import runtime_link as runtime_link_module
from pykubelet.actors.pleg import PlegSettings
from pykubelet.actors.root import Daemon, DaemonSettings
from pykubelet.actors.runtime_link import RuntimeLinkSettings
from pykubelet.pods.backoff import MAX_DELAY, CrashLoopBackOff
from pykubelet.pods.manifest import decode_manifests
from pykubelet.supervisor import NotRunning, RestartIntensityExceeded, SupervisorError

from .runtime import ENDPOINT, EPOCH, SimRuntime
from .schedule import CRI_CODES, PodSpec, Schedule

NODE = "localhost"
# Once faults stop: the longest crash-loop back-off, a resync, a housekeeping and a GC
# round fit in it with room to spare.
CONVERGENCE_BOUND = MAX_DELAY + 120.0
KILL_BOUND = 60.0
QUIET_BEFORE_STOP = 10.0  # virtual seconds a cancelled tree may take to stop


@dataclass
class Result:
    schedule: Schedule
    violations: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    trace: int = 0  # a digest of the runtime calls: equal for equal runs
    virtual_seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.violations


@dataclass
class _Pod:
    spec: PodSpec
    uid: str
    path: str


class _Model:
    """What the schedule asked for: the pods wanted now, and per container the exits
    that the restart policy says must be made good."""

    def __init__(self) -> None:
        self.pods: dict[str, _Pod] = {}
        self.gone: set[str] = set()  # UIDs deleted or replaced by an edit
        self.required: Counter[tuple[str, str]] = Counter()
        self.done: dict[tuple[str, str], int] = {}  # exited for good: its exit code
        # An identical manifest written again after a delete is the same UID: a new life.
        self.lives: Counter[str] = Counter()

    def exited(self, pod: _Pod, name: str, code: int) -> None:
        policy = pod.spec.restart_policy
        if policy == "Always" or (policy == "OnFailure" and code != 0):
            self.required[(pod.uid, name)] += 1
            self.done.pop((pod.uid, name), None)
        else:
            self.done[(pod.uid, name)] = code


class _Harness:
    def __init__(self, schedule: Schedule, workdir: str) -> None:
        self.schedule = schedule
        self.rng = random.Random(schedule.seed * 1_000_003 + 17)
        self.runtime = SimRuntime(rng=self.rng)
        self.manifests = os.path.join(workdir, "manifests")
        self.root_dir = os.path.join(workdir, "root")
        os.makedirs(self.manifests, exist_ok=True)
        os.makedirs(self.root_dir)
        self.model = _Model()
        self.result = Result(schedule)
        self.daemon: Daemon | None = None
        self._scope: trio.CancelScope | None = None
        self._stopped: trio.Event | None = None
        self.crash_log: list[str] = []

    def violate(self, what: str) -> None:
        self.result.violations.append(f"t={trio.current_time():.2f} {what}")

    # -- the daemon, started and killed --------------------------------------------

    def _settings(self) -> DaemonSettings:
        return DaemonSettings(
            root_dir=self.root_dir,
            runtime=RuntimeLinkSettings(endpoint=ENDPOINT),
            healthz_port=0,
            enable_fault_injection=True,
            pod_manifest_path=self.manifests,
            pleg=PlegSettings(container_events=False),
        )

    async def start_daemon(self, nursery: trio.Nursery) -> None:
        runtime_link_module.CriClient = self.runtime.client_factory()
        daemon = Daemon(self._settings())
        scope = trio.CancelScope()
        stopped = trio.Event()

        async def run(task_status=trio.TASK_STATUS_IGNORED) -> None:
            try:
                with scope:
                    await daemon.run(task_status=task_status)
            except RestartIntensityExceeded as exc:
                self.violate(f"the tree gave up: {exc}")
            finally:
                stopped.set()

        self.daemon, self._scope, self._stopped = daemon, scope, stopped
        await nursery.start(run)

    async def stop_daemon(self, *, kill: bool) -> None:
        """kill: as kill -9 (the runtime sees its connections go at once); else a SIGTERM."""
        if self._scope is None:
            return
        if kill:
            self.runtime.kill_process()
        self._scope.cancel()
        with trio.move_on_after(KILL_BOUND) as overdue:
            await self._stopped.wait()
        if overdue.cancelled_caught:
            stuck = _stuck_actors(self.daemon.root.snapshot())
            if not kill:  # a kill -9 needs no orderly stop; a SIGTERM does
                self.violate(f"the tree did not stop within {KILL_BOUND:g}s of being cancelled; still running: {stuck}")
            if os.environ.get("SIM_DEBUG"):
                for task in _all_tasks():
                    print(task.name, [f"{f.f_code.co_filename.split('/')[-1]}:{f.f_lineno}"
                                      for f, _ in task.iter_await_frames() if "site-packages" not in f.f_code.co_filename])
            # What the process's end would do: every incarnation cancelled, shields or not.
            _cancel_every_incarnation(self.daemon.root)
            with trio.move_on_after(KILL_BOUND) as again:
                await self._stopped.wait()
            if again.cancelled_caught:
                raise RuntimeError("the tree does not stop even with every incarnation cancelled")
        self._scope = None

    # -- steps ---------------------------------------------------------------------

    def _write(self, spec: PodSpec) -> _Pod:
        path = os.path.join(self.manifests, f"{spec.name}.json")
        data = json.dumps(spec.manifest(), sort_keys=True).encode()
        (pod,) = decode_manifests(data, origin=path, source="file", node_name=NODE)
        tmp = os.path.join(self.manifests, f".{spec.name}.tmp")
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
        return _Pod(spec, pod.metadata.uid, path)

    async def step(self, index: int, nursery: trio.Nursery) -> None:
        step = self.schedule.steps[index]
        model, rt = self.model, self.runtime
        if step.kind in ("add", "edit"):
            old = model.pods.get(step.pod.name)
            pod = self._write(step.pod)
            if old is not None and old.uid != pod.uid:
                model.gone.add(old.uid)
            if old is None or old.uid != pod.uid:
                model.lives[pod.uid] += 1
                for c in step.pod.containers:
                    model.done.pop((pod.uid, c.name), None)
            model.gone.discard(pod.uid)
            model.pods[step.pod.name] = pod
        elif step.kind == "delete":
            old = model.pods.pop(step.pod_name, None)
            if old is not None:
                os.unlink(old.path)
                model.gone.add(old.uid)
        elif step.kind == "exit":
            pod = model.pods.get(step.pod_name)
            if pod is not None and rt.exit_container(pod.uid, step.container, step.code) is not None:
                model.exited(pod, step.container, step.code)
        elif step.kind == "crash":
            await self._crash(step.path)
        elif step.kind == "cri-error":
            rt.inject_error(step.operation, CRI_CODES[step.code], after=step.after)
        elif step.kind == "runtime-down":
            rt.down = True

            async def back_up() -> None:
                await trio.sleep(step.duration)
                rt.down = False

            nursery.start_soon(back_up)
        elif step.kind == "hang-stop":
            rt.hang_next_stop = True
        elif step.kind == "kill-daemon":
            await self.stop_daemon(kill=True)
            await self.start_daemon(nursery)
        elif step.kind == "restart-daemon":  # SIGTERM, then the service manager starts it again
            await self.stop_daemon(kill=False)
            await self.start_daemon(nursery)

    async def _crash(self, path: str) -> None:
        if path.startswith("root/pod-workers/"):
            pod = self.model.pods.get(path.rsplit("/", 1)[1])
            if pod is None:
                return
            path = f"root/pod-workers/{pod.uid}"
        try:
            owner, name = self.daemon.root.locate(path)
            with trio.move_on_after(30):
                await owner.crash_child(name)
        except (LookupError, NotRunning, SupervisorError):
            pass  # not there (yet, or any more): the step does nothing

    # -- invariants ----------------------------------------------------------------

    def converged(self) -> list[str]:
        """What still differs from the desired state (empty once converged)."""
        rt, model = self.runtime, self.model
        problems = []
        wanted = {p.uid for p in model.pods.values()}
        for uid in sorted(rt.pod_uids() - wanted):
            problems.append(f"pod {uid[:8]} is not wanted but the runtime still holds it")
        for pod in model.pods.values():
            running = rt.running(pod.uid)
            expect_running = [c.name for c in pod.spec.containers if (pod.uid, c.name) not in model.done]
            for c in pod.spec.containers:
                n = len(running.get(c.name, []))
                want = 1 if c.name in expect_running else 0
                if n != want:
                    problems.append(f"pod {pod.spec.name} ({pod.uid[:8]}) container {c.name}: {n} running, want {want}")
            ready = rt.ready_sandboxes(pod.uid)
            if len(ready) > 1 or (expect_running and len(ready) != 1):
                problems.append(f"pod {pod.spec.name} ({pod.uid[:8]}): {len(ready)} ready sandboxes")
            status = self.daemon.statuses.get(pod.uid) if self.daemon else None
            phase = status.phase if status is not None else None
            if expect_running:
                want_phase = "Running"
            else:
                codes = [model.done[(pod.uid, c.name)] for c in pod.spec.containers]
                want_phase = "Succeeded" if all(code == 0 for code in codes) else "Failed"
            if phase != want_phase:
                problems.append(f"pod {pod.spec.name} ({pod.uid[:8]}): phase {phase}, want {want_phase}")
        return problems

    def check_restarts(self) -> None:
        """Invariant 1: no container was created more often than its first start, the
        exits its restart policy makes good, and the creations that never ran allow."""
        rt, model = self.runtime, self.model
        for (uid, name), ids in sorted(rt.creations.items()):
            allowed = max(1, model.lives[uid]) + model.required[(uid, name)] + rt.never_started(uid, name)
            if len(ids) > allowed:
                pod = next((p.spec.name for p in model.pods.values() if p.uid == uid), uid[:8])
                self.violate(
                    f"pod {pod} container {name}: created {len(ids)} times, but only {allowed} allowed "
                    f"({max(1, model.lives[uid])} lives + {model.required[(uid, name)]} exits to restart + {rt.never_started(uid, name)} never ran)"
                )

    def check_tasks(self) -> None:
        """Invariant 3: nothing of the daemon runs once it stopped."""
        leftover = [t.name for t in _all_tasks() - self._baseline if t is not trio.lowlevel.current_task()]
        if leftover:
            self.violate(f"tasks left behind after the tree stopped: {sorted(set(leftover))}")

    # -- the run -------------------------------------------------------------------

    async def run(self) -> None:
        schedule = self.schedule
        async with trio.open_nursery() as nursery:
            self._baseline = _all_tasks()
            await self.start_daemon(nursery)
            start = trio.current_time()
            settle = schedule.faults_end
            for index, step in enumerate(schedule.steps):
                await trio.sleep_until(start + step.at)
                await self.step(index, nursery)
                if step.kind == "runtime-down":
                    settle = max(settle, step.at + step.duration)
            # Faults have stopped: every pod must reach its desired state within the bound.
            deadline = start + settle + CONVERGENCE_BOUND
            problems = self.converged()
            while problems and trio.current_time() < deadline:
                await trio.sleep(1.0)
                problems = self.converged()
                if os.environ.get("SIM_DEBUG"):
                    print(f"t={trio.current_time():.1f} containers={len(self.runtime.containers)} {problems[:3]}")
            for problem in problems:
                self.violate(f"not converged {CONVERGENCE_BOUND:g}s after the faults stopped: {problem}")
            for v in self.runtime.violations:
                self.result.violations.append(f"t={v.at:.2f} {v.what}")
            self.check_restarts()
            # A quiet moment, then SIGTERM: a stop during a restart is the step
            # restart-daemon's business (BUG 2), not every run's.
            await trio.sleep(QUIET_BEFORE_STOP)
            await self.stop_daemon(kill=False)
            nursery.cancel_scope.cancel()
        self.result.virtual_seconds = trio.current_time()
        self.check_tasks()


def _cancel_every_incarnation(supervisor) -> None:
    for child in supervisor._children:
        incarnation = child.incarnation
        if incarnation is None:
            continue
        if incarnation.supervisor is not None:
            _cancel_every_incarnation(incarnation.supervisor)
        if incarnation.scope is not None:
            incarnation.scope.cancel()


def _stuck_actors(snapshot) -> list[str]:
    out = []
    for child in snapshot.children:
        out += _stuck_actors(child)
    if snapshot.state not in ("stopped", "failed"):
        out.append(f"{snapshot.path}({snapshot.state})")
    return out


def _all_tasks() -> set:
    found = set()

    def walk(task) -> None:
        found.add(task)
        for nursery in task.child_nurseries:
            for child in nursery.child_tasks:
                walk(child)

    walk(trio.lowlevel.current_root_task())
    return found


class _CrashLog(logging.Handler):
    """Actor crashes not caused on purpose: noted (let it crash), not failed."""

    def __init__(self, into: list[str]) -> None:
        super().__init__(logging.ERROR)
        self.into = into

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage().startswith("actor crashed") and "InjectedCrash" not in record.getMessage():
            self.into.append(f"{getattr(record, 'actor', '?')}: {record.getMessage()[:200]}")


async def _inline_to_thread(fn, *args, abandon_on_cancel=None, cancellable=None, limiter=None, **_):
    # File I/O the actors hand to threads, done in place: a thread would let the mock
    # clock jump while it runs, and the run would no longer be a function of the seed.
    await trio.lowlevel.checkpoint()
    return fn(*args)


@contextlib.contextmanager
def _simulated_process(seed: int):
    real_time, real_time_ns = time.time, time.time_ns
    saved_cri = runtime_link_module.CriClient
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
    trio.to_thread.run_sync = _inline_to_thread
    random.seed(seed)
    trio_rng.seed(seed)
    pykubelet_log = logging.getLogger("pykubelet")
    saved_level, saved_propagate = pykubelet_log.level, pykubelet_log.propagate
    if os.environ.get("SIM_LOG"):  # e.g. SIM_LOG=INFO: the daemon's log, on virtual time
        logging.basicConfig(level=os.environ["SIM_LOG"], format="%(relativeCreated)d %(name)s %(levelname)s %(message)s")
    else:
        pykubelet_log.setLevel(logging.ERROR)
        pykubelet_log.propagate = False
    try:
        yield
    finally:
        time.time, time.time_ns = real_time, real_time_ns
        runtime_link_module.CriClient = saved_cri
        root_module.CrashLoopBackOff = saved_backoff
        trio.to_thread.run_sync = saved_thread
        random.setstate(saved_random)
        trio_rng.setstate(saved_trio_rng)
        pykubelet_log.setLevel(saved_level)
        pykubelet_log.propagate = saved_propagate


def run_schedule(schedule: Schedule) -> Result:
    """Play one schedule on a fresh simulated node; the invariants it broke, if any."""
    # The same path for the same seed: a static pod's UID hashes its manifest's path, and
    # UIDs order sets and dicts, so a replay must see the same ones. Short: the admin
    # socket lives under it.
    workdir = os.path.join(tempfile.gettempdir(), f"pksim-{os.getuid()}", str(schedule.seed))
    shutil.rmtree(workdir, ignore_errors=True)
    crashes: list[str] = []
    handler = _CrashLog(crashes)
    logging.getLogger("pykubelet").addHandler(handler)
    try:
        with _simulated_process(schedule.seed):
            harness = _Harness(schedule, workdir)
            try:
                trio.run(harness.run, clock=trio.testing.MockClock(autojump_threshold=0))
            except BaseException as exc:  # noqa: BLE001 - a crash of the harness or the tree is a finding
                if isinstance(exc, KeyboardInterrupt):
                    raise
                harness.result.violations.append(f"the run raised {type(exc).__name__}: {exc!r}"[:2000])
    finally:
        logging.getLogger("pykubelet").removeHandler(handler)
        shutil.rmtree(workdir, ignore_errors=True)
    result = harness.result
    result.notes.extend(crashes)
    trace = [(len(harness.runtime.creations), harness.runtime.calls, round(result.virtual_seconds, 6))]
    trace += sorted((uid, name, tuple(ids)) for (uid, name), ids in harness.runtime.creations.items())
    result.trace = int(hashlib.sha256(repr(trace).encode()).hexdigest()[:12], 16)
    return result


def shrink(schedule: Schedule, still_fails) -> Schedule:
    """Drop steps while the failure reproduces: chunks first, then one step at a time."""
    current = schedule
    chunk = max(1, len(current.steps) // 2)
    while chunk >= 1:
        i = 0
        while i < len(current.steps):
            candidate = current.without(set(range(i, min(i + chunk, len(current.steps)))))
            if candidate.steps and still_fails(candidate):
                current = candidate
            else:
                i += chunk
        chunk //= 2
    return current
