"""pykubelet-inspect logs and exec against a standalone daemon on the embedded runtime,
through its admin socket: the README's example static pod, no API server, no kubectl."""

from __future__ import annotations

import os
import select
import shutil
import signal
import subprocess
import time
from pathlib import Path

from tests.support.daemon import console_script
from tests.support.pods import phase, wait_for_pod

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "static-pods" / "hello.yaml"
LINE = b"hello from pykubelet\n"  # the example writes one every 5 s


def install_example(manifests: Path) -> None:
    hidden = manifests / ".hello.yaml.tmp"  # the file source skips hidden files: never half a manifest
    shutil.copy(EXAMPLE, hidden)
    hidden.rename(manifests / "hello.yaml")


def read_lines(stream, count: int, timeout: float) -> bytes:
    """At least `count` lines from an unbuffered pipe, or what came within the timeout."""
    seen = b""
    deadline = time.monotonic() + timeout
    while seen.count(b"\n") < count:
        ready, _, _ = select.select([stream], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            break
        chunk = os.read(stream.fileno(), 4096)
        if not chunk:
            break
        seen += chunk
    return seen


def test_logs_and_exec_of_a_static_pod_through_the_admin_socket(embedded_runtime, manifests, start_daemon):
    daemon = start_daemon("embedded", root_dir=Path(embedded_runtime.root))
    install_example(manifests)
    wait_for_pod(daemon, "hello", phase("Running"), "Running")
    daemon.wait_for(lambda: LINE.decode() in daemon.inspect("logs", "hello").stdout, "the first log line")

    # -f: the last line at once, the next as the container writes it, until Ctrl-C (exit 0).
    follow = subprocess.Popen(
        [console_script("pykubelet-inspect"), "--socket", daemon.admin_socket, "logs", "hello", "-f", "--tail", "1"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, bufsize=0,
    )
    try:
        assert read_lines(follow.stdout, 1, timeout=10) == LINE
        assert read_lines(follow.stdout, 1, timeout=10) == LINE  # written ~5 s later
        follow.send_signal(signal.SIGINT)
        assert follow.wait(timeout=10) == 0, follow.stderr.read()
        assert follow.stderr.read() == b""
    finally:
        if follow.poll() is None:
            follow.kill()
            follow.wait()

    # By now the log has at least two lines: all of them, then only the last.
    whole = daemon.inspect("logs", "hello")
    assert (whole.returncode, whole.stderr) == (0, "")
    assert whole.stdout.count(LINE.decode()) >= 2 and set(whole.stdout.splitlines()) == {LINE.decode().strip()}
    for name in ("hello", "hello-node1"):
        tail = daemon.inspect("logs", name, "--tail", "1")
        assert (tail.returncode, tail.stdout, tail.stderr) == (0, LINE.decode(), "")

    ran = daemon.inspect("exec", "hello", "--", "echo", "hi")
    assert (ran.returncode, ran.stdout, ran.stderr) == (0, "hi\n", "")

    missing = daemon.inspect("logs", "nope")
    assert missing.returncode == 1
    assert missing.stderr == (
        'pykubelet-inspect: pod "nope" not found in namespace "default"; `pykubelet-inspect pods` lists the pods\n')
