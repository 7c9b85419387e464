"""Machine instructions the CRI port spends on one probe's ExecSync, counted by valgrind's
callgrind: the same figure whatever else the machine is doing (hash seed fixed), where CPU time moves 10 %
from run to run here (docs/performance.md). What it misses is what a cold cache adds.

    python bench/instructions.py [--events 100]

The shape is bench/wakeup.py's exec-client (a scripted grpc-go peer: a WINDOW_UPDATE and a
ping after the request, then the answer), slowed down so that valgrind's own slowness
changes no wake-up: the ping 20 ms after the request, the answer 50 ms after it, 100 ms
between calls. Each figure is the client process's instructions for 50 + `--events` calls
less those for 50, divided by `--events`: start-up, imports and exit cancel out.
  exec-client   a probe's period wake-up and its ExecSync through CriClient
  pacing        the period wake-up alone (trio.sleep)
The call's share is the difference. Run with PYTHONPATH at a directory whose `pykubelet`
links to another checkout to count that checkout. Needs valgrind (Debian's package).
"""

from __future__ import annotations

import argparse
import importlib
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile

import trio

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import wakeup  # noqa: E402
from _interpreter import interpreter_line  # noqa: E402

PING_AFTER = 0.02
ANSWER_AFTER = 0.05
GAP = 0.1
FIRST = 50  # calls counted in both runs: what they share cancels out


async def _pacing(events: int) -> None:
    for _ in range(events):
        await trio.sleep(GAP)


def child(scenario: str, events: int) -> None:
    for module in ("pykubelet.ports.cri", "prometheus_client"):  # as the daemon has them
        importlib.import_module(module)
    if scenario == "pacing":
        trio.run(_pacing, events)
        return
    wakeup.PING_AFTER, wakeup.ANSWER_AFTER = PING_AFTER, ANSWER_AFTER
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "cri.sock")
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(path)
        listener.listen()
        peer = wakeup._fork(lambda: wakeup._grpc_peer(listener, events, True))
        listener.close()
        try:
            trio.run(wakeup._exec_client, f"unix://{path}", events, GAP)
        finally:
            os.waitpid(peer, 0)


def count(scenario: str, events: int) -> int:
    """The instructions of the client process (not its forked peer) for `events` calls."""
    with tempfile.TemporaryDirectory() as folder:
        subprocess.run(
            ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", f"--log-file={folder}/%p",
             sys.executable, __file__, "--child", scenario, "--events", str(events)],
            check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            env={**os.environ, "PYTHONHASHSEED": "0"},  # the same dict layouts in every run
        )
        client = min(os.listdir(folder), key=int)  # the peer is forked after the client starts
        with open(os.path.join(folder, client)) as log:
            return int(re.search(r"Collected : (\d+)", log.read()).group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=100)
    parser.add_argument("--child", choices=("exec-client", "pacing"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.events)
        return
    print(interpreter_line(), flush=True)
    if shutil.which("valgrind") is None:
        raise SystemExit("bench/instructions.py needs valgrind: apt-get install valgrind")
    figures = {}
    for scenario in ("exec-client", "pacing"):
        figures[scenario] = (count(scenario, FIRST + args.events) - count(scenario, FIRST)) / args.events
        print(f"  {scenario:12} {figures[scenario] / 1e3:8.1f} K instructions an event", flush=True)
    print(f"  the call's share {(figures['exec-client'] - figures['pacing']) / 1e3:8.1f} K instructions")


if __name__ == "__main__":
    main()
