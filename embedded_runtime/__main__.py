"""`python -m pykubelet.embedded_runtime --root DIR --socket PATH [--detach]`: run the
embedded CRI runtime for the kubelet root dir DIR (its files go to DIR/embedded-runtime/).

--detach forks before anything else is imported: the first process exits 0 once the
runtime serves on PATH (1 if it failed: see its log), the runtime itself lives on in a
session of its own, reparented away from whoever started it. The launcher uses it.
"""

from __future__ import annotations

import argparse
import os
import sys


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m pykubelet.embedded_runtime",
        description="pykubelet's embedded CRI runtime: containers as plain host processes "
        "(no isolation, images not pulled)",
    )
    parser.add_argument("--root", required=True,
                        help="the kubelet root dir (state goes to ROOT/embedded-runtime)")
    parser.add_argument("--socket", required=True, help="the unix socket to serve CRI on")
    parser.add_argument("--detach", action="store_true",
                        help="return once serving; the runtime runs on in the background")
    parser.add_argument("--v", type=int, default=0, help="log verbosity (1+: debug)")
    return parser.parse_args(argv)


def _detach() -> int | None:
    """Fork. In the first process, wait for the runtime's "ready" and return the exit code;
    in the runtime, return None with the write end of the readiness pipe in fd READY_FD."""
    read_end, write_end = os.pipe()
    if os.fork() != 0:
        os.close(write_end)
        with os.fdopen(read_end, "rb") as ready:
            answer = ready.read()
        if answer == b"ready\n":
            return 0
        print("embedded runtime: failed to start (see the messages above)", file=sys.stderr)
        return 1
    os.close(read_end)
    os.setsid()
    os.environ["PYKUBELET_EMBEDDED_READY_FD"] = str(write_end)
    return None


def main(argv: list[str] | None = None) -> int:
    args = _parse(sys.argv[1:] if argv is None else argv)
    if args.detach:
        code = _detach()
        if code is not None:
            return code

    # Imported after the fork: grpc must not be loaded in a process that forks.
    import asyncio
    import logging

    from .server import AlreadyRunning, serve

    logging.basicConfig(
        level=logging.DEBUG if args.v > 0 else logging.INFO,
        format="%(asctime)s %(levelname)s [%(process)d] %(name)s: %(message)s",
        stream=sys.stderr,
    )
    ready_fd = int(os.environ.pop("PYKUBELET_EMBEDDED_READY_FD", "-1"))

    def on_ready() -> None:
        if ready_fd >= 0:
            os.write(ready_fd, b"ready\n")
            os.close(ready_fd)

    try:
        asyncio.run(serve(args.root, args.socket, on_ready))
    except AlreadyRunning as error:
        logging.getLogger("pykubelet.embedded_runtime").error("not starting: %s", error)
        return 1
    except Exception:
        logging.getLogger("pykubelet.embedded_runtime").exception("the embedded runtime failed")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
