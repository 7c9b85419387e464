"""Supervisor strategies, intensity, back-off, shutdown and dynamic children, on MockClock."""

from __future__ import annotations


import msgspec
import pytest
import trio

from pykubelet.messages.supervision import ActorSnapshot
from pykubelet.supervisor import (
    NO_BACKOFF,
    ActorRecord,
    ChildSpec,
    MailboxSpec,
    RestartBackoff,
    RestartIntensity,
    RestartIntensityExceeded,
    Supervisor,
    SupervisorError,
)


class Boom(Exception):
    pass


class Journal:
    """Records what actors did, in order, and lets a test make one crash on demand."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.crash_now: dict[str, trio.Event] = {}

    def crash(self, name: str) -> None:
        self.crash_now[name].set()

    def actor(self, name: str, *, restart="permanent", shutdown=5.0, cleanup=0.0, mailbox=None):
        async def start(ctx) -> None:
            self.lines.append(f"start {name}")
            self.crash_now[name] = trio.Event()
            try:
                await self.crash_now[name].wait()
                raise Boom(f"{name} failed")
            finally:
                with ctx.shutdown_scope():
                    await trio.sleep(cleanup)
                    self.lines.append(f"stop {name}")

        return ChildSpec(name, start, restart=restart, shutdown=shutdown, mailbox=mailbox)

    def take(self) -> list[str]:
        lines, self.lines = self.lines, []
        return lines


async def settle() -> None:
    await trio.sleep(0.5)  # autojump: lets every ready task run


@pytest.fixture
def journal() -> Journal:
    return Journal()


async def run_tree(nursery, supervisor: Supervisor) -> Supervisor:
    return await nursery.start(supervisor.run)


@pytest.mark.parametrize(
    "strategy, expected",
    [
        ("one_for_one", ["stop b", "start b"]),
        ("one_for_all", ["stop b", "stop c", "stop a", "start a", "start b", "start c"]),
        ("rest_for_one", ["stop b", "stop c", "start b", "start c"]),
    ],
)
async def test_strategy_restarts_exactly_the_right_children_in_order(
    autojump_clock, journal, strategy, expected
):
    tree = Supervisor("root", [journal.actor(n) for n in "abc"], strategy=strategy)
    async with trio.open_nursery() as nursery:
        await run_tree(nursery, tree)
        assert journal.take() == ["start a", "start b", "start c"]
        journal.crash("b")
        await settle()
        assert journal.take() == expected
        nursery.cancel_scope.cancel()
    assert journal.take() == ["stop c", "stop b", "stop a"]


async def test_restart_counts_and_last_error_show_in_snapshot(autojump_clock, journal):
    tree = Supervisor("root", [journal.actor("a"), journal.actor("b")], strategy="one_for_all")
    async with trio.open_nursery() as nursery:
        await run_tree(nursery, tree)
        journal.crash("a")
        await settle()
        snap = tree.snapshot()
        a, b = snap.children
        assert (a.restarts, b.restarts) == (1, 1)
        assert a.last_error.type == "Boom" and a.last_error.message == "a failed"
        assert b.last_error is None
        assert a.state == b.state == "running"
        nursery.cancel_scope.cancel()


async def test_intensity_exceeded_at_root_stops_everything_with_a_clear_error(
    autojump_clock, journal
):
    tree = Supervisor(
        "root",
        [journal.actor("a"), journal.actor("b")],
        intensity=RestartIntensity(max_restarts=2, period=10),
        backoff=NO_BACKOFF,
    )
    gave_up = pytest.RaisesExc(
        RestartIntensityExceeded,
        match=r"supervisor root gave up: 3 restarts within 10s, the last of root/b \(Boom: b failed\)",
    )
    with pytest.RaisesGroup(gave_up):
        async with trio.open_nursery() as nursery:
            await run_tree(nursery, tree)
            for _ in range(3):
                journal.crash("b")
                await settle()
    assert journal.lines.count("start b") == 3  # first start and two restarts
    assert journal.lines[-1] == "stop a"  # b is already dead; a stopped last of all


async def test_restarts_spread_beyond_the_period_do_not_escalate(autojump_clock, journal):
    tree = Supervisor(
        "root",
        [journal.actor("a")],
        intensity=RestartIntensity(max_restarts=2, period=10),
        backoff=NO_BACKOFF,
    )
    async with trio.open_nursery() as nursery:
        await run_tree(nursery, tree)
        for _ in range(6):
            journal.crash("a")
            await trio.sleep(6)
        assert tree.snapshot().children[0].restarts == 6
        nursery.cancel_scope.cancel()


async def test_per_child_intensity_lets_isolated_crashes_of_several_children_add_up(autojump_clock, journal):
    # Three children crash twice each within the period: six restarts, above the
    # supervisor-wide budget of two, but no child needed more than two.
    tree = Supervisor(
        "root",
        [journal.actor("a"), journal.actor("b"), journal.actor("c")],
        intensity=RestartIntensity(max_restarts=2, period=10, per_child=True),
        backoff=NO_BACKOFF,
    )
    async with trio.open_nursery() as nursery:
        await run_tree(nursery, tree)
        for _ in range(2):
            for name in "abc":
                journal.crash(name)
                await settle()
        assert [c.restarts for c in tree.snapshot().children] == [2, 2, 2]
        assert all(c.state == "running" for c in tree.snapshot().children)
        nursery.cancel_scope.cancel()


async def test_per_child_intensity_still_gives_up_on_one_crash_looping_child(autojump_clock, journal):
    tree = Supervisor(
        "root",
        [journal.actor("a"), journal.actor("b")],
        intensity=RestartIntensity(max_restarts=2, period=10, per_child=True),
        backoff=NO_BACKOFF,
    )
    gave_up = pytest.RaisesExc(
        RestartIntensityExceeded,
        match=r"supervisor root gave up: 3 restarts of root/b within 10s, the last \(Boom: b failed\)",
    )
    with pytest.RaisesGroup(gave_up):
        async with trio.open_nursery() as nursery:
            await run_tree(nursery, tree)
            journal.crash("a")  # a's restart is a's own: b's budget is untouched
            await settle()
            for _ in range(3):
                journal.crash("b")
                await settle()
    assert journal.lines.count("start b") == 3


async def test_nested_supervisor_escalates_to_its_parent_which_restarts_it(
    autojump_clock, journal
):
    inner = Supervisor.child_spec(
        "inner",
        [journal.actor("x")],
        intensity=RestartIntensity(max_restarts=1, period=10),
        backoff=NO_BACKOFF,
    )
    tree = Supervisor("root", [journal.actor("a"), inner], strategy="one_for_one")
    async with trio.open_nursery() as nursery:
        await run_tree(nursery, tree)
        journal.take()
        journal.crash("x")
        await settle()
        journal.crash("x")  # second restart within the period: inner gives up
        await settle()
        assert journal.take() == ["stop x", "start x", "stop x", "start x"]
        snap = tree.snapshot()
        inner_snap = snap.children[1]
        assert inner_snap.kind == "supervisor" and inner_snap.restarts == 1
        assert inner_snap.last_error.type == "RestartIntensityExceeded"
        assert inner_snap.children[0].path == "root/inner/x"
        assert inner_snap.children[0].restarts == 0  # a fresh supervisor, fresh children
        assert snap.children[0].restarts == 0  # a untouched
        nursery.cancel_scope.cancel()


async def test_transient_child_is_restarted_after_a_crash_but_not_after_a_normal_exit(
    autojump_clock,
):
    runs = []

    async def work(ctx):
        runs.append(len(runs))
        if len(runs) == 1:
            raise Boom("first run fails")
        # second run finishes normally

    tree = Supervisor("root", [ChildSpec("t", work, restart="transient")])
    async with trio.open_nursery() as nursery:
        await run_tree(nursery, tree)
        await settle()
        child = tree.snapshot().children[0]
        assert runs == [0, 1] and child.state == "stopped" and child.restarts == 1
        nursery.cancel_scope.cancel()


async def test_temporary_child_is_never_restarted_and_leaves_the_tree(autojump_clock, journal):
    tree = Supervisor("root", [journal.actor("a"), journal.actor("tmp", restart="temporary")])
    async with trio.open_nursery() as nursery:
        await run_tree(nursery, tree)
        journal.crash("tmp")
        await settle()
        assert [c.name for c in tree.snapshot().children] == ["a"]
        assert journal.lines.count("start tmp") == 1
        nursery.cancel_scope.cancel()


async def test_permanent_child_that_returns_is_restarted(autojump_clock):
    runs = []

    async def work(ctx):
        runs.append(1)
        if len(runs) < 3:
            return
        await trio.sleep_forever()

    tree = Supervisor("root", [ChildSpec("p", work)], backoff=NO_BACKOFF)
    async with trio.open_nursery() as nursery:
        await run_tree(nursery, tree)
        await settle()
        assert len(runs) == 3
        nursery.cancel_scope.cancel()


async def test_shutdown_is_in_reverse_order_and_cleanup_is_cut_at_the_timeout(autojump_clock, journal):
    tree = Supervisor(
        "root",
        [
            journal.actor("first", cleanup=1.0, shutdown=5.0),
            journal.actor("slow", cleanup=100.0, shutdown=2.0),
            journal.actor("last", cleanup=0.5, shutdown=5.0),
        ],
    )
    async with trio.open_nursery() as nursery:
        await run_tree(nursery, tree)
        journal.take()
        stopped_at = trio.current_time()
        nursery.cancel_scope.cancel()
    elapsed = trio.current_time() - stopped_at
    # last cleans up (0.5s), slow is cut at its 2s timeout and never logs, first (1s).
    assert journal.take() == ["stop last", "stop first"]
    assert elapsed == pytest.approx(3.5)


async def test_back_off_delays_a_child_that_fails_at_once(autojump_clock):
    starts: list[float] = []

    async def failing(ctx):
        starts.append(trio.current_time())
        raise Boom("at once")

    tree = Supervisor(
        "root",
        [ChildSpec("f", failing)],
        intensity=RestartIntensity(max_restarts=100, period=1000),
        backoff=RestartBackoff(initial=0.1, maximum=0.4, reset_after=10),
    )
    async with trio.open_nursery() as nursery:
        await run_tree(nursery, tree)
        await trio.sleep(2.0)
        nursery.cancel_scope.cancel()
    gaps = [round(b - a, 6) for a, b in zip(starts, starts[1:])]
    assert gaps[:6] == [0.0, 0.1, 0.2, 0.4, 0.4, 0.4]


async def test_back_off_resets_after_a_child_ran_long_enough(autojump_clock):
    starts: list[float] = []

    async def flaky(ctx):
        starts.append(trio.current_time())
        if len(starts) in (1, 2, 3):
            raise Boom("quick")
        await trio.sleep(20)  # healthy for longer than reset_after, then fails once
        raise Boom("after a while")

    tree = Supervisor(
        "root",
        [ChildSpec("f", flaky)],
        intensity=RestartIntensity(max_restarts=100, period=1000),
        backoff=RestartBackoff(initial=1.0, maximum=8.0, reset_after=10),
    )
    async with trio.open_nursery() as nursery:
        await run_tree(nursery, tree)
        await trio.sleep(25)
        nursery.cancel_scope.cancel()
    gaps = [round(b - a, 6) for a, b in zip(starts, starts[1:])]
    assert gaps[:4] == [0.0, 1.0, 2.0, 20.0]  # the failure after 20s restarts at once


async def test_crash_storm_of_hundreds_is_bounded_by_intensity(autojump_clock):
    starts = 0

    async def storm(ctx):
        nonlocal starts
        starts += 1
        raise Boom("storm")

    tree = Supervisor("root", [ChildSpec("s", storm)])  # default intensity and back-off
    with pytest.RaisesGroup(RestartIntensityExceeded):
        async with trio.open_nursery() as nursery:
            await run_tree(nursery, tree)
            await trio.sleep(3600)
    assert starts == RestartIntensity().max_restarts + 1


async def test_dynamic_children_start_and_stop_at_run_time(autojump_clock, journal):
    pool = Supervisor.child_spec("workers", [], strategy="one_for_one")
    tree = Supervisor("root", [journal.actor("a"), pool])
    async with trio.open_nursery() as nursery:
        await run_tree(nursery, tree)
        sup, name = tree.locate("root/workers")
        pool_sup = sup._find(name).incarnation.supervisor
        path = await pool_sup.start_child(journal.actor("w1", restart="transient"))
        assert path == "root/workers/w1"
        await pool_sup.start_child(journal.actor("w2", restart="transient"))
        with pytest.raises(SupervisorError, match="already has a child named 'w1'"):
            await pool_sup.start_child(journal.actor("w1"))
        assert [c.path for c in tree.snapshot().children[1].children] == [
            "root/workers/w1",
            "root/workers/w2",
        ]
        journal.crash("w1")
        await settle()
        assert tree.snapshot().children[1].children[0].restarts == 1
        await pool_sup.stop_child("w1")
        assert [c.name for c in tree.snapshot().children[1].children] == ["w2"]
        assert "stop w1" in journal.take()
        nursery.cancel_scope.cancel()


async def test_operator_crash_and_restart_by_path(autojump_clock, journal):
    inner = Supervisor.child_spec("inner", [journal.actor("x")])
    tree = Supervisor("root", [journal.actor("a"), inner])
    async with trio.open_nursery() as nursery:
        await run_tree(nursery, tree)
        journal.take()
        owner, name = tree.locate("root/inner/x")
        await owner.crash_child(name)
        await settle()
        x = tree.snapshot().children[1].children[0]
        assert x.restarts == 1 and x.last_error.type == "InjectedCrash"
        assert "fault injection" in x.last_error.message
        owner, name = tree.locate("root/a")
        await owner.restart_child(name)
        assert tree.snapshot().children[0].restarts == 1
        assert journal.take() == ["stop x", "start x", "stop a", "start a"]
        with pytest.raises(LookupError):
            tree.locate("root/nope")
        with pytest.raises(LookupError):
            tree.locate("root")
        nursery.cancel_scope.cancel()


async def test_message_sent_during_a_restart_is_delivered_exactly_once(autojump_clock):
    received: list[tuple[int, str]] = []
    incarnation = 0

    async def echo(ctx):
        nonlocal incarnation
        incarnation += 1
        me = incarnation
        async for message in ctx.mailbox:
            if message == "die":
                raise Boom("told to")
            received.append((me, message))

    spec = ChildSpec(
        "echo", echo, mailbox=MailboxSpec(capacity=8, durable=True, accepts=(str,))
    )
    tree = Supervisor("root", [spec], backoff=RestartBackoff(initial=1.0))
    async with trio.open_nursery() as nursery:
        await run_tree(nursery, tree)
        mailbox = tree.registry.lookup("root/echo")
        await mailbox.send("one")
        await mailbox.send("die")
        await settle()
        await mailbox.send("die")  # second quick failure: restart waits 1s of back-off
        await trio.sleep(0.1)
        assert tree.snapshot().children[0].state == "restarting"
        await mailbox.send("during the restart")
        await trio.sleep(2)
        assert received == [(1, "one"), (3, "during the restart")]
        assert tree.snapshot().children[0].mailbox.received == 4
        nursery.cancel_scope.cancel()


async def test_plain_mailbox_is_emptied_for_a_new_incarnation(autojump_clock):
    received = []

    async def slow(ctx):
        message = await ctx.mailbox.receive()
        if message == "die":
            raise Boom("told to")
        received.append(message)
        await trio.sleep_forever()

    spec = ChildSpec("slow", slow, mailbox=MailboxSpec(capacity=8, durable=False))
    tree = Supervisor("root", [spec], backoff=RestartBackoff(initial=1.0))
    async with trio.open_nursery() as nursery:
        await run_tree(nursery, tree)
        mailbox = tree.registry.lookup("root/slow")
        mailbox.send_nowait("die")
        await settle()
        mailbox.send_nowait("die")
        await trio.sleep(0.1)  # backing off now
        mailbox.send_nowait("lost")
        await trio.sleep(2)
        assert received == [] and mailbox.depth == 0
        nursery.cancel_scope.cancel()


async def test_snapshot_encodes_to_the_operator_contract_json(autojump_clock, journal):
    spec = journal.actor("a", mailbox=MailboxSpec(capacity=4))
    tree = Supervisor("root", [spec, Supervisor.child_spec("sub", [])], strategy="rest_for_one")
    async with trio.open_nursery() as nursery:
        await run_tree(nursery, tree)
        data = msgspec.json.decode(msgspec.json.encode(tree.snapshot()))
        assert data["name"] == "root" and data["path"] == "root"
        assert data["kind"] == "supervisor" and data["strategy"] == "rest_for_one"
        a = data["children"][0]
        assert set(a) == {
            "name", "path", "kind", "state", "restarts", "strategy", "last_error",
            "started_at", "mailbox", "children",
        }
        assert a["mailbox"] == {"depth": 0, "capacity": 4, "received": 0}
        assert a["started_at"].endswith("Z") and a["state"] == "running"
        assert msgspec.json.decode(msgspec.json.encode(tree.snapshot()), type=ActorSnapshot)
        nursery.cancel_scope.cancel()


def test_snapshot_shows_each_start_time_of_an_actor_as_rfc3339():
    record = ActorRecord(name="a", path="root/a", kind="worker")
    assert record.snapshot(children=[]).started_at is None
    record.started_at = 1_800_000_000.25
    assert record.snapshot(children=[]).started_at == "2027-01-15T08:00:00.250Z"
    record.started_at = 1_800_000_060.5  # restarted: the new time, not the one formatted before
    assert record.snapshot(children=[]).started_at == "2027-01-15T08:01:00.500Z"


def test_back_off_delay_is_capped_and_never_overflows():
    assert RestartBackoff().delay(10_000) == RestartBackoff().maximum
    assert NO_BACKOFF.delay(10_000) == 0.0
    assert RestartBackoff(initial=0.01, maximum=1.0).delay(3) == 0.02


async def test_find_supervisor_returns_the_running_nested_supervisor(autojump_clock, journal):
    tree = Supervisor("root", [journal.actor("a"), Supervisor.child_spec("pool", [])])
    async with trio.open_nursery() as nursery:
        await run_tree(nursery, tree)
        pool = tree.find_supervisor("root/pool")
        assert pool.path == "root/pool" and tree.find_supervisor("root") is tree
        await pool.start_child(journal.actor("w", restart="transient"))
        assert pool.has_child("w") and not pool.has_child("x")
        with pytest.raises(LookupError):
            tree.find_supervisor("root/nope")
        nursery.cancel_scope.cancel()


async def test_an_actor_can_address_a_sibling_started_after_it(autojump_clock):
    got = []

    async def early(ctx):
        await ctx.registry.lookup("root/late").send("hello")
        await trio.sleep_forever()

    async def late(ctx):
        got.append(await ctx.mailbox.receive())
        await trio.sleep_forever()

    tree = Supervisor("root", [ChildSpec("early", early), ChildSpec("late", late, mailbox=MailboxSpec())])
    async with trio.open_nursery() as nursery:
        await run_tree(nursery, tree)
        await settle()
        assert got == ["hello"]
        nursery.cancel_scope.cancel()


async def test_a_restarted_supervisor_forgets_the_addresses_of_its_dynamic_children(autojump_clock, journal):
    """Found by the simulation's leak check: a pod worker's address outlived the pod
    workers' supervisor, one per pod that lived when it was restarted."""
    pool = Supervisor.child_spec("workers", [journal.actor("static", mailbox=MailboxSpec(durable=True))])
    tree = Supervisor("root", [pool])
    async with trio.open_nursery() as nursery:
        await run_tree(nursery, tree)
        await tree.find_supervisor("root/workers").start_child(
            journal.actor("w1", restart="transient", mailbox=MailboxSpec(durable=True)))
        assert "root/workers/w1" in tree.registry
        await tree.restart_child("workers")
        await settle()
        assert "root/workers/w1" not in tree.registry
        assert "root/workers/static" in tree.registry  # a static child keeps its mailbox
        nursery.cancel_scope.cancel()


async def test_an_error_raised_beside_the_cancellation_of_a_stopped_child_stays_inside_its_supervisor(
    autojump_clock, journal
):
    # Found by the soak: the sync loop's start_child failed (the pod workers' supervisor was
    # restarting) while the root was stopping the sync loop for that same restart, so its
    # nursery raised a group of that error and Cancelled. The incarnation's cancel scope
    # took the Cancelled out, and the rest escaped the supervisor: the daemon exited.
    async def fails_while_stopped(ctx) -> None:
        journal.lines.append("start b")
        async with trio.open_nursery() as nursery:
            nursery.start_soon(trio.sleep_forever)
            try:
                await trio.sleep_forever()
            finally:
                raise Boom("b failed while being stopped")

    tree = Supervisor("root", [journal.actor("a"), ChildSpec("b", fails_while_stopped)], strategy="rest_for_one",
                      backoff=NO_BACKOFF)
    async with trio.open_nursery() as nursery:
        await run_tree(nursery, tree)
        journal.crash("a")  # rest_for_one: b is stopped and started again
        await settle()
        await tree.restart_child("b")  # an operator's restart stops it too
        await settle()
        assert journal.lines.count("start b") == 3
        assert [c.state for c in tree.snapshot().children] == ["running", "running"]
        nursery.cancel_scope.cancel()
