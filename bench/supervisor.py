"""Supervisor benchmark: restart latency and mailbox throughput, against the issue's targets.

    python bench/supervisor.py [--restarts N] [--messages N] [--crash-logging]

1. Restart latency: an actor with a durable mailbox is sent "crash" then "ping"; it raises
   on "crash" and its next incarnation's first receive gets the "ping". Measured from just
   before the raise to that receive, with no back-off and an intensity that never trips
   (the mechanism, not the policy), and the supervisor's crash log (a formatted
   traceback per crash) switched off unless --crash-logging sends it to /dev/null.
   Also: the first restart after a quiet period with the default RestartBackoff.
2. Mailbox throughput: one actor sends small messages to another through its named
   mailbox (registry.lookup(path).send / ctx.mailbox.receive), against a bare trio memory
   channel of the same capacity in the same run; best of 3 each.
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import statistics
import time

import trio

from pykubelet.supervisor import NO_BACKOFF, ChildSpec, MailboxSpec, RestartBackoff, RestartIntensity, Supervisor

NEVER_GIVE_UP = RestartIntensity(max_restarts=10**9, period=1.0)
CAPACITY = 256


class Crasher:
    """An actor that raises on "crash" and times the next "ping" it receives."""

    def __init__(self) -> None:
        self.samples: list[float] = []
        self.crashed_at = 0.0
        self.pinged = trio.Event()

    async def actor(self, ctx) -> None:
        while True:
            message = await ctx.mailbox.receive()
            if message == "crash":
                self.crashed_at = time.perf_counter()
                raise RuntimeError("crash on request")
            self.samples.append(time.perf_counter() - self.crashed_at)
            self.pinged.set()

    def tree(self, backoff: RestartBackoff) -> Supervisor:
        spec = ChildSpec("actor", self.actor, mailbox=MailboxSpec(CAPACITY, durable=True))
        return Supervisor("bench", [spec], intensity=NEVER_GIVE_UP, backoff=backoff)

    async def crash_once(self, supervisor: Supervisor) -> None:
        self.pinged = trio.Event()
        mailbox = supervisor.registry.lookup("bench/actor")
        await mailbox.send("crash")
        await mailbox.send("ping")  # waits in the durable mailbox for the next incarnation
        await self.pinged.wait()


async def restart_latency(rounds: int) -> list[float]:
    """One tree, no back-off: every restart is measured the same way."""
    crasher = Crasher()
    async with trio.open_nursery() as nursery:
        supervisor = await nursery.start(crasher.tree(NO_BACKOFF).run)
        for _ in range(rounds):
            await crasher.crash_once(supervisor)
        nursery.cancel_scope.cancel()
    return crasher.samples


async def bare_respawn_latency(rounds: int) -> list[float]:
    """Baseline: the same crash and ping, with a plain loop that respawns a trio task."""
    crasher = Crasher()
    send, receive = trio.open_memory_channel[object](CAPACITY)

    class Context:  # just what Crasher.actor reads
        mailbox = receive

    async def respawn_forever() -> None:
        while True:
            try:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(crasher.actor, Context)
            except* RuntimeError:
                pass

    async with trio.open_nursery() as nursery:
        nursery.start_soon(respawn_forever)
        for _ in range(rounds):
            crasher.pinged = trio.Event()
            await send.send("crash")
            await send.send("ping")
            await crasher.pinged.wait()
        nursery.cancel_scope.cancel()
    return crasher.samples


async def first_restart_latency(rounds: int) -> list[float]:
    """A fresh tree per round, default back-off: each restart is a first one."""
    crasher = Crasher()
    for _ in range(rounds):
        async with trio.open_nursery() as nursery:
            supervisor = await nursery.start(crasher.tree(RestartBackoff()).run)
            await crasher.crash_once(supervisor)
            nursery.cancel_scope.cancel()
    return crasher.samples


async def through_mailbox(count: int) -> float:
    """Seconds to move `count` messages from one actor to another through a named mailbox."""
    finished = trio.Event()
    times: dict[str, float] = {}

    async def producer(ctx) -> None:
        mailbox = ctx.registry.lookup("bench/consumer")
        times["start"] = time.perf_counter()
        for i in range(count):
            await mailbox.send(i)

    async def consumer(ctx) -> None:
        for _ in range(count):
            await ctx.mailbox.receive()
        times["end"] = time.perf_counter()
        finished.set()

    tree = Supervisor("bench", [
        ChildSpec("consumer", consumer, restart="temporary", mailbox=MailboxSpec(CAPACITY)),
        ChildSpec("producer", producer, restart="temporary"),
    ])
    async with trio.open_nursery() as nursery:
        await nursery.start(tree.run)
        await finished.wait()
        nursery.cancel_scope.cancel()
    return times["end"] - times["start"]


async def through_bare_channel(count: int) -> float:
    send, receive = trio.open_memory_channel[object](CAPACITY)
    times: dict[str, float] = {}

    async def producer() -> None:
        times["start"] = time.perf_counter()
        for i in range(count):
            await send.send(i)

    async def consumer() -> None:
        for _ in range(count):
            await receive.receive()
        times["end"] = time.perf_counter()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(consumer)
        nursery.start_soon(producer)
    return times["end"] - times["start"]


def latencies(samples: list[float]) -> tuple[str, float]:
    ordered = sorted(samples)
    p99 = ordered[math.ceil(0.99 * len(ordered)) - 1]
    ms = lambda seconds: f"{seconds * 1000:.3f} ms"  # noqa: E731
    return f"p50 {ms(statistics.median(ordered))}  p99 {ms(p99)}  max {ms(ordered[-1])}", p99


def met(ok: bool) -> str:
    return "target met" if ok else "TARGET MISSED"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--restarts", type=int, default=2000)
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--crash-logging", action="store_true")
    args = parser.parse_args()
    crash_log = logging.getLogger("pykubelet.supervisor")
    if args.crash_logging:
        crash_log.addHandler(logging.StreamHandler(open(os.devnull, "w")))
        crash_log.propagate = False
    else:
        crash_log.disabled = True

    logging_state = "to /dev/null" if args.crash_logging else "off"
    print(f"restart latency, one_for_one, no back-off, intensity never trips, "
          f"crash logging {logging_state}, {args.restarts} restarts:")
    supervised = trio.run(restart_latency, args.restarts)
    bare_respawn = trio.run(bare_respawn_latency, args.restarts)
    figures, p99 = latencies(supervised)
    print(f"  supervisor     {figures}   (target p99 <= 5 ms: {met(p99 <= 0.005)})")
    baseline, _ = latencies(bare_respawn)
    print(f"  bare respawn   {baseline}   (a loop restarting a trio task: the baseline)")
    ratio = statistics.median(supervised) / statistics.median(bare_respawn)
    print(f"  supervisor / bare respawn, p50: {ratio:.1f}x")
    print("first restart after a quiet period, default RestartBackoff, 200 fresh trees:")
    print(f"  {latencies(trio.run(first_restart_latency, 200))[0]}   (immediate by design)")

    n = args.messages
    mailbox, bare = math.inf, math.inf
    for _ in range(3):  # interleaved, so both see the same machine weather
        mailbox = min(mailbox, trio.run(through_mailbox, n))
        bare = min(bare, trio.run(through_bare_channel, n))
    ratio = bare / mailbox
    print(f"throughput, {n} messages, capacity {CAPACITY}, best of 3:")
    print(f"  named mailbox  {n / mailbox:>12,.0f} msg/s")
    print(f"  bare channel   {n / bare:>12,.0f} msg/s")
    print(f"  mailbox / bare {ratio:.2f}x   (target >= 0.5x: {met(ratio >= 0.5)})")


if __name__ == "__main__":
    main()
