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
  exec-client     the same shape through the CRI port as the daemon ships it (CriClient's
                  exec_sync, its metrics, ports/grpc_client): the peer sends the HTTP/2
                  frames containerd's grpc-go sends for an ExecSync (a WINDOW_UPDATE and a
                  ping on the request's DATA, then the answer as HEADERS, DATA and trailers
                  in one write). Less exec-pacing, the port's own share of a probe's
                  ExecSync; its imports are made before the CPU count starts. Run the
                  script with PYTHONPATH at a directory whose `pykubelet` links to another
                  checkout to measure that checkout's port
  exec-client-no-ping
                  the same with a peer that never pings: what grpc-go's BDP ping (its
                  wake-up and answer) costs a call, beside exec-client
The table gives each figure and its ratio to the blocking baseline of the same round;
figures are medians over --rounds. Nothing leaves the machine: a socket pair, or for
exec-client a unix socket in a temporary folder.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable

import trio
from _interpreter import interpreter_line

SCENARIOS = ("blocking", "trio-socket", "trio-timer", "exec-trio", "exec-thread", "exec-pacing", "exec-client",
             "exec-client-no-ping")
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


def _grpc_peer(listener: socket.socket, events: int, ping: bool) -> None:
    """A CRI server of one connection, blocking, as grpc-go answers: the Version handshake,
    then `events` ExecSync calls in the shape above (without the ping unless `ping`)."""
    from pykubelet.messages.cri_api import api_pb2
    from pykubelet.ports.grpc_client import hpack
    from pykubelet.ports.grpc_client.frames import (
        ACK, DATA, END_HEADERS, END_STREAM, HEADERS, PING, PREFACE, SETTINGS, WINDOW_UPDATE, frame,
    )

    sock, _ = listener.accept()
    received = bytearray()

    def request() -> int:
        """The stream of the next request, read up to its last DATA frame (what else the
        client sends, its SETTINGS ACK and PING ACKs, is passed over)."""
        nonlocal received
        while True:
            while len(received) < 9 or len(received) < 9 + int.from_bytes(received[:3], "big"):
                data = sock.recv(65536)
                if not data:
                    raise EOFError
                received += data
            length = int.from_bytes(received[:3], "big")
            kind, flags, stream = received[3], received[4], int.from_bytes(received[5:9], "big")
            del received[:9 + length]
            if kind == DATA and flags & END_STREAM:
                return stream

    def answer(stream: int, message: bytes) -> bytes:
        head = hpack.encode([(b":status", b"200"), (b"content-type", b"application/grpc")])
        return (frame(HEADERS, END_HEADERS, stream, head)
                + frame(DATA, 0, stream, len(message).to_bytes(5, "big") + message)
                + frame(HEADERS, END_HEADERS | END_STREAM, stream, hpack.encode([(b"grpc-status", b"0")])))

    while len(received) < len(PREFACE):
        received += sock.recv(65536)
    del received[:len(PREFACE)]
    sock.sendall(frame(SETTINGS, 0, 0) + frame(SETTINGS, ACK, 0))
    version = api_pb2.VersionResponse(version="0.1.0", runtime_name="peer", runtime_version="1",
                                      runtime_api_version="v1").SerializeToString()
    sock.sendall(answer(request(), version))
    for _ in range(events):
        stream = request()
        time.sleep(PING_AFTER)
        if ping:
            sock.sendall(frame(WINDOW_UPDATE, 0, 0, struct.pack(">L", 32)) + frame(PING, 0, 0, b"bdp-ping"))
        time.sleep(ANSWER_AFTER)
        sock.sendall(answer(stream, b""))  # an ExecSyncResponse of exit code 0, no output
    sock.recv(1)  # until the client closes


async def _exec_client(endpoint: str, events: int, gap: float) -> None:
    from pykubelet.ports.cri import CriClient, RuntimeOperationMetrics
    from prometheus_client import CollectorRegistry

    metrics = RuntimeOperationMetrics(CollectorRegistry())
    async with CriClient(endpoint, metrics=metrics) as cri:
        for _ in range(events):
            await trio.sleep(gap)
            await cri.exec_sync("a-container", ["cat", "/www/ready"], 1)


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


def _fork(serve: Callable[[], None]) -> int:
    """The pid of a forked peer process that runs serve() and exits."""
    pid = os.fork()
    if pid == 0:
        try:
            serve()
        finally:
            os._exit(0)
    return pid


def child(scenario: str, events: int, gap: float) -> float:
    if scenario.startswith("exec-client"):
        return _client_child(events, gap, ping=scenario == "exec-client")
    ours, theirs = socket.socketpair()

    def serve() -> None:
        ours.close()
        _peer(theirs, scenario, events, gap)

    peer = _fork(serve)
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


def _client_child(events: int, gap: float, ping: bool) -> float:
    for module in ("pykubelet.ports.cri", "prometheus_client"):  # before the count, as the daemon has them
        importlib.import_module(module)

    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "cri.sock")
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(path)
        listener.listen()
        peer = _fork(lambda: _grpc_peer(listener, events, ping))
        listener.close()
        try:
            started = time.process_time()
            trio.run(_exec_client, f"unix://{path}", events, gap)
            return (time.process_time() - started) / events
        finally:
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
    print(interpreter_line(), flush=True)
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
        print(f"  {scenario:19} {statistics.median(figures[scenario]) * 1e6:7.1f} us   "
              f"x{statistics.median(ratios[scenario]):.2f} the blocking wake-up")
    calls = {s: statistics.median(figures[s]) - statistics.median(figures["exec-pacing"])
             for s in ("exec-trio", "exec-thread", "exec-client", "exec-client-no-ping")}
    print("  the call's share beyond the period's sleep: "
          + ", ".join(f"{s} {share * 1e6:.0f} us" for s, share in calls.items()))


if __name__ == "__main__":
    main()
