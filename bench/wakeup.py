"""What one wake-up after a wait costs a process on this machine: the floor under every CRI
call, probe and timer of the daemon, measured apart from any runtime.

    python bench/wakeup.py [--events 300] [--gap 0.03] [--rounds 3]

Each scenario runs in a child process of its own, with a forked peer process on the other
end of a unix socket pair that sleeps --gap seconds between events (the peer's CPU is not
counted). A child reports its own CPU time (user + system, all threads) per event:
  blocking        a thread blocked in recv(), woken by one byte, answers one byte: the
                  baseline, the least a wake-up can cost here
  trio-socket     the same from a trio task (trio's socket, its epoll loop)
  trio-timer      a trio task woken by its own trio.sleep(--gap), nothing else
  exec-trio       the shape of an ExecSync to containerd as a probe makes it, per probe: the
                  task wakes from its period's sleep and sends a request; 0.5 ms later the
                  peer sends a "ping" that must be answered (grpc-go's BDP ping), and 3 ms
                  later the answer; one trio task reads, as ports/grpc_client's reader does
  exec-thread     the same with the reading done by a thread in blocking recv() that answers
                  the ping itself and wakes the trio task once, through the trio token, when
                  the answer comes (the design that would take the ping off trio's loop)
  exec-pacing     only the period's sleep of the two above: what is left of them is the
                  CRI call's own share
The table gives each figure and its ratio to the blocking baseline of the same round;
figures are medians over --rounds. Nothing leaves the machine: a socket pair only.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time

import trio

SCENARIOS = ("blocking", "trio-socket", "trio-timer", "exec-trio", "exec-thread", "exec-pacing")
PING_AFTER = 0.0005  # seconds from the request to the server's ping
ANSWER_AFTER = 0.003  # seconds from the ping's answer to the call's answer


def _peer(sock: socket.socket, scenario: str, events: int, gap: float) -> None:
    if scenario == "trio-timer":
        return  # nothing to talk to
    for _ in range(events):
        if scenario.startswith("exec"):
            if sock.recv(1) != b"q":  # the request, sent after the caller's own sleep
                return
            if scenario == "exec-pacing":
                continue
            time.sleep(PING_AFTER)
            sock.send(b"p")
            if sock.recv(1) != b"a":
                return
            time.sleep(ANSWER_AFTER)
            sock.send(b"r")
        else:
            time.sleep(gap)
            sock.send(b"x")
            if not sock.recv(1):
                return


def _blocking(sock: socket.socket, events: int, gap: float) -> None:
    for _ in range(events):
        sock.recv(1)
        sock.send(b"y")


async def _trio_socket(sock: socket.socket, events: int, gap: float) -> None:
    peer = trio.socket.from_stdlib_socket(sock)
    for _ in range(events):
        await peer.recv(1)
        await peer.send(b"y")


async def _trio_timer(sock: socket.socket, events: int, gap: float) -> None:
    for _ in range(events):
        await trio.sleep(gap)


async def _exec_trio(sock: socket.socket, events: int, gap: float) -> None:
    peer = trio.socket.from_stdlib_socket(sock)
    for _ in range(events):
        await trio.sleep(gap)
        await peer.send(b"q")
        while await peer.recv(1) == b"p":
            await peer.send(b"a")


async def _exec_thread(sock: socket.socket, events: int, gap: float) -> None:
    token = trio.lowlevel.current_trio_token()
    waiting: list = []

    def reader() -> None:
        while byte := sock.recv(1):
            if byte == b"p":
                sock.send(b"a")
            else:
                token.run_sync_soon(trio.lowlevel.reschedule, waiting.pop())

    threading.Thread(target=reader, daemon=True).start()
    for _ in range(events):
        await trio.sleep(gap)
        waiting.append(trio.lowlevel.current_task())
        sock.send(b"q")
        await trio.lowlevel.wait_task_rescheduled(lambda _: trio.lowlevel.Abort.FAILED)


async def _exec_pacing(sock: socket.socket, events: int, gap: float) -> None:
    for _ in range(events):
        await trio.sleep(gap)
        sock.send(b"q")


def child(scenario: str, events: int, gap: float) -> float:
    ours, theirs = socket.socketpair()
    peer = os.fork()
    if peer == 0:
        ours.close()
        try:
            _peer(theirs, scenario, events, gap)
        finally:
            os._exit(0)
    theirs.close()
    try:
        started = time.process_time()
        if scenario == "blocking":
            _blocking(ours, events, gap)
        else:
            run = {"trio-socket": _trio_socket, "trio-timer": _trio_timer, "exec-trio": _exec_trio,
                   "exec-thread": _exec_thread, "exec-pacing": _exec_pacing}[scenario]
            trio.run(run, ours, events, gap)
        return (time.process_time() - started) / events
    finally:
        ours.close()
        os.waitpid(peer, 0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=300)
    parser.add_argument("--gap", type=float, default=0.03, help="seconds between events (default 0.03)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--child", choices=SCENARIOS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.events, args.gap)))
        return
    figures: dict[str, list[float]] = {s: [] for s in SCENARIOS}
    ratios: dict[str, list[float]] = {s: [] for s in SCENARIOS}
    for number in range(args.rounds):
        row = {}
        for scenario in SCENARIOS:
            out = subprocess.run(
                [sys.executable, __file__, "--child", scenario, "--events", str(args.events), "--gap", str(args.gap)],
                capture_output=True, text=True, check=True,
            )
            row[scenario] = json.loads(out.stdout.strip().splitlines()[-1])
        for scenario, cpu in row.items():
            figures[scenario].append(cpu)
            ratios[scenario].append(cpu / row["blocking"])
        print(f"round {number + 1}: " + ", ".join(f"{s} {c * 1e6:.0f} us" for s, c in row.items()), flush=True)
    print(f"\nCPU per event after a {args.gap * 1e3:g} ms wait, {args.events} events x {args.rounds} rounds "
          f"(median; load average {' '.join(f'{x:.2f}' for x in os.getloadavg())})")
    for scenario in SCENARIOS:
        print(f"  {scenario:12} {statistics.median(figures[scenario]) * 1e6:7.1f} us   "
              f"x{statistics.median(ratios[scenario]):.2f} the blocking wake-up")
    calls = {s: statistics.median(figures[s]) - statistics.median(figures["exec-pacing"])
             for s in ("exec-trio", "exec-thread")}
    print("  the call's share beyond the period's sleep: "
          + ", ".join(f"{s} {share * 1e6:.0f} us" for s, share in calls.items()))


if __name__ == "__main__":
    main()
