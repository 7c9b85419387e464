"""Pods with volumes of API data against the same pods without: the cost of mounting, and
the API traffic of 110 such pods at rest.

    python bench/volumes.py [--pods 30] [--rounds 3] [--steady-pods 110] [--seconds 60]
    python bench/volumes.py --pods 10 --rounds 1 --steady-pods 20 --seconds 20   # a quick run

Needs what bench/cluster.py needs (root, containerd, runc, busybox-static, gcc, the `test`
extra) and, like it, starts and ends its own containerd, test API server and daemons.

1. Start, --rounds rounds, alternating which kind goes first: --pods plain pods (one
   looping container), and --pods pods each mounting a configMap volume, a secret volume
   and the projected kube-api-access volume a real cluster adds (a TokenRequest per pod),
   each on a fresh API server and cluster-mode daemon. Per pod: seconds from the first
   POST until an API watch showed it Running. Printed: p50 and p99 of each kind, and the
   ratio of their p50s (target <= 1.3x: the mounting must not serialize pod starts).
2. Steady: --steady-pods pods with volumes, left 10 s, then --seconds watched: the node's
   requests by verb and resource. Target: no reads of unchanged ConfigMaps and Secrets
   (they are watched), no TokenRequest (none is due within the window).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _support import met, p50_p99, private_containerd  # noqa: E402
from cluster import USER, api_start, bench_pod, cluster  # noqa: E402
from density import watch as watch_daemon  # noqa: E402

from tests.support.apiserver import objects  # noqa: E402

NS = "/api/v1/namespaces/default"
TOKEN_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"


def volume_pod(name: str, node: str) -> dict:
    pod = bench_pod(name, node)
    pod["spec"]["volumes"] = [
        {"name": "config", "configMap": {"name": "bench-config"}},
        {"name": "creds", "secret": {"secretName": "bench-secret"}},
        {"name": "kube-api-access", "projected": {"defaultMode": 420, "sources": [
            {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
            {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
            {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"fieldPath": "metadata.namespace"}}]}},
        ]}},
    ]
    pod["spec"]["containers"][0]["volumeMounts"] = [
        {"name": "config", "mountPath": "/config"}, {"name": "creds", "mountPath": "/creds"},
        {"name": "kube-api-access", "mountPath": TOKEN_DIR, "readOnly": True},
    ]
    return pod


def create_objects(server) -> None:
    for path, body in ((f"{NS}/configmaps", objects.configmap("bench-config", {"a": "1", "b": "2"})),
                       (f"{NS}/secrets", objects.secret("bench-secret", {"password": b"bench"}))):
        answer = server.admin.post(path, json=body)
        if answer.status_code != 201:
            raise RuntimeError(f"creating {path}: {answer.status_code} {answer.text}")


def start(containerd, count: int, with_volumes: bool) -> list[float]:
    with cluster(containerd) as (server, daemon):
        create_objects(server)
        result = api_start(server, daemon, count, make_pod=volume_pod if with_volumes else bench_pod)
        return result.each


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steady-pods", type=int, default=110)
    parser.add_argument("--seconds", type=float, default=60.0)
    args = parser.parse_args()
    with private_containerd() as containerd:
        plain: list[float] = []
        mounted: list[float] = []
        for number in range(1, args.rounds + 1):
            order = [False, True] if number % 2 else [True, False]
            for with_volumes in order:
                kind = "with volumes" if with_volumes else "plain"
                print(f"round {number}/{args.rounds}: {args.pods} pods {kind} ...", flush=True)
                each = start(containerd, args.pods, with_volumes)
                (mounted if with_volumes else plain).extend(each)
                p50, p99 = p50_p99(each)
                print(f"    p50 {p50:.2f} s, p99 {p99:.2f} s, last {max(each):.2f} s", flush=True)
        plain_p50, plain_p99 = p50_p99(plain)
        mounted_p50, mounted_p99 = p50_p99(mounted)
        ratio = mounted_p50 / plain_p50
        print(f"\nstart of {args.pods} pods, {args.rounds} rounds, per pod until Running:")
        print(f"  plain         p50 {plain_p50:.2f} s  p99 {plain_p99:.2f} s")
        print(f"  with volumes  p50 {mounted_p50:.2f} s  p99 {mounted_p99:.2f} s")
        print(f"  with/plain p50 {ratio:.2f}x (p99 {mounted_p99 / plain_p99:.2f}x); target p50 <= 1.3x: "
              f"{met(ratio <= 1.3)}", flush=True)

        print(f"\nsteady state: {args.steady_pods} pods with volumes ...", flush=True)
        with cluster(containerd) as (server, daemon):
            create_objects(server)
            api_start(server, daemon, args.steady_pods, make_pod=volume_pod)
            tokens_at_start = len(server.token_requests(user=USER))
            time.sleep(10)
            since = time.time()
            server.clear_requests()
            window = watch_daemon(daemon, args.seconds)
            records = [r for r in server.requests(since=since, user=USER) if r.time <= since + window.seconds]
            by_kind = Counter((r.verb, r.resource) for r in records)
            minutes = window.seconds / 60
            print(f"  TokenRequests during the start: {tokens_at_start} (one per pod: {args.steady_pods})")
            print(f"  requests of {USER} in {window.seconds:.0f} s, per minute:")
            for (verb, resource), n in sorted(by_kind.items(), key=lambda item: (str(item[0][1]), str(item[0][0]))):
                print(f"    {verb or '-':<8}{resource or '-':<24}{n:>6}{n / minutes:>9.2f}")
            reads = sum(n for (v, r), n in by_kind.items() if r in ("configmaps", "secrets") and v in ("get", "list"))
            tokens = by_kind.get(("create", "serviceaccounts/token"), 0)
            print(f"  target no reads of unchanged ConfigMaps/Secrets: {reads}, {met(reads == 0)}")
            print(f"  target no token refresh before it is due: {tokens}, {met(tokens == 0)}")
            print(f"  daemon RSS median {statistics.median(window.rss) / (1 << 20):.1f} MB; "
                  f"CPU {window.cpu_percent:.2f} % of one core", flush=True)
    print("done (API server, daemons and containerd stopped)")


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        sys.exit("interrupted (everything started was cleaned up)")
