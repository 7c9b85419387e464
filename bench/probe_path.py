"""The probe path alone: what the daemon's probe workers cost per probe against the same
connections made by a plain blocking loop, in the same run, with no runtime in between.

    python bench/probe_path.py [--pods 110] [--seconds 15] [--rounds 3] [--kinds readiness,liveness]

--pods busybox httpd processes listen on 127.0.0.1:<--base-port and up> (needs busybox,
from busybox-static). Each round runs two children, one after the other:
- raw (the baseline): one thread, blocking sockets, on the probes' 50 ms grid, each pod's
  readiness probe as a GET /ready (connect, the probe's request, one read, close) and its
  liveness probe as a connect and close, once a second;
- workers: the daemon's probe workers (actors/probes/worker.py with the real handlers of
  ports/probers.py, a results board and metrics; no supervisor, no sync loop), an httpGet
  readiness and a tcpSocket liveness probe every second per pod, as bench/probes.py's pods.
Each child reports its own CPU (user + system) over a window of --seconds after a warm-up,
divided by the probes it made; the ratio is workers / raw, the median over the rounds. Only
127.0.0.1 is addressed.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SLACK = 0.05  # the probe workers' grid (PROBE_TIMER_SLACK)
WARM_UP = 3.0


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _request(port: int) -> bytes:
    return (f"GET /ready HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUser-Agent: kube-probe/1.36\r\nAccept: */*\r\n"
            "Connection: close\r\n\r\n").encode()


def raw(ports: list[int], kinds: list[str], seconds: float) -> dict:
    def probe(port: int, http: bool) -> None:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as sock:
            if http:
                sock.sendall(_request(port))
                sock.recv(16 * 1024)

    slots = round(1 / SLACK)
    start = time.monotonic()
    slot, count, began, cpu0 = 0, 0, None, 0.0
    while time.monotonic() - start < WARM_UP + seconds:
        if began is None and time.monotonic() - start >= WARM_UP:
            began, cpu0, count = time.monotonic(), _cpu(), 0
        for i in range(slot % slots, len(ports), slots):
            for kind in kinds:
                probe(ports[i], kind == "readiness")
                count += 1
        slot += 1
        time.sleep(max(0.0, start + slot * SLACK - time.monotonic()))
    return {"probes": count, "cpu": _cpu() - cpu0, "seconds": time.monotonic() - began}


def workers(ports: list[int], kinds: list[str], seconds: float) -> dict:
    import msgspec
    import trio
    from prometheus_client import CollectorRegistry

    from pykubelet.actors.probes import ProbeMetrics, ProbeResults, probe_worker_actor
    from pykubelet.messages.pod import Pod

    class Discard:  # the sync loop's mailbox: ProbeResults are not this bench's business
        async def send(self, message) -> None:
            pass

    class Context:
        class registry:  # noqa: N801
            @staticmethod
            def lookup(name: str) -> Discard:
                return Discard()

    def pod(i: int, port: int) -> Pod:
        probes = {
            "readinessProbe": {"httpGet": {"path": "/ready", "port": port}, "periodSeconds": 1},
            "livenessProbe": {"tcpSocket": {"port": port}, "periodSeconds": 1},
        }
        return msgspec.convert({
            "metadata": {"name": f"web-{i}", "namespace": "default", "uid": f"uid-{i}"},
            "spec": {"containers": [{"name": "web", **probes}]},
            "status": {"podIP": "127.0.0.1"},
        }, Pod)

    metrics = ProbeMetrics(CollectorRegistry())

    def probes_run() -> float:
        return sum(s.value for m in metrics.probes.collect() for s in m.samples if s.name.endswith("_total"))

    async def main() -> dict:
        results = ProbeResults()
        async with trio.open_nursery() as nursery:
            for i, port in enumerate(ports):
                for kind in kinds:
                    actor = probe_worker_actor(pod(i, port), "web", f"cid-{i}", kind, time.time(), results=results,
                                               metrics=metrics, runtime=None, jitter=(i % round(1 / SLACK)) * SLACK)
                    nursery.start_soon(actor, Context())
            await trio.sleep(WARM_UP)
            began, cpu0, count0 = time.monotonic(), _cpu(), probes_run()
            await trio.sleep(seconds)
            figures = {"probes": probes_run() - count0, "cpu": _cpu() - cpu0, "seconds": time.monotonic() - began}
            nursery.cancel_scope.cancel()
        return figures

    return trio.run(main)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=110)
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--base-port", type=int, default=23000)
    parser.add_argument("--kinds", default="readiness,liveness", help="readiness (httpGet), liveness (tcpSocket)")
    parser.add_argument("--child", choices=("raw", "workers"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    kinds = args.kinds.split(",")
    ports = list(range(args.base_port, args.base_port + args.pods))
    if args.child:
        measure = raw if args.child == "raw" else workers
        print(json.dumps(measure(ports, kinds, args.seconds)))
        return
    busybox = shutil.which("busybox")
    if busybox is None:
        sys.exit("needs busybox (Debian: busybox-static)")
    www = Path(tempfile.mkdtemp(prefix="probe-path-"))
    (www / "ready").write_text("ok\n")
    servers = [subprocess.Popen([busybox, "httpd", "-f", "-p", f"127.0.0.1:{port}", "-h", str(www)]) for port in ports]
    try:
        time.sleep(0.5)
        per_probe: dict[str, list[float]] = {"raw": [], "workers": []}
        for n in range(args.rounds):
            for child in ("raw", "workers"):
                out = subprocess.run(
                    [sys.executable, __file__, "--child", child, "--pods", str(args.pods), "--seconds", str(args.seconds),
                     "--base-port", str(args.base_port), "--kinds", args.kinds],
                    check=True, capture_output=True, text=True,
                ).stdout
                figures = json.loads(out)
                per_probe[child].append(figures["cpu"] / figures["probes"])
                print(f"round {n + 1} {child:8}: {figures['probes']:.0f} probes in {figures['seconds']:.1f} s, "
                      f"{1e6 * figures['cpu'] / figures['probes']:6.1f} us CPU per probe, load {os.getloadavg()[0]:.1f}",
                      flush=True)
        base, probes = statistics.median(per_probe["raw"]), statistics.median(per_probe["workers"])
        print(f"median of {args.rounds}: raw {1e6 * base:.1f} us, workers {1e6 * probes:.1f} us CPU per probe: "
              f"{probes / base:.2f}x the blocking loop")
    finally:
        for server in servers:
            server.terminate()
        for server in servers:
            server.wait()
        shutil.rmtree(www, ignore_errors=True)


if __name__ == "__main__":
    main()
