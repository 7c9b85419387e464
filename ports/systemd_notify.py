"""sd_notify without libsystemd: NAME=VALUE lines in one datagram to $NOTIFY_SOCKET, and the
watchdog period from $WATCHDOG_USEC/$WATCHDOG_PID, as sd_notify(3) and
sd_watchdog_enabled(3) define them. Used by the daemon's service notifier (cli/systemd.py).
"""

from __future__ import annotations

import logging
import os
import socket
from typing import Mapping

log = logging.getLogger("pykubelet.systemd")


class WatchdogConfigError(ValueError):
    """$WATCHDOG_USEC is set but is not a positive number of microseconds."""


class NotifySocket:
    """The service manager's notification socket: a unix datagram socket at a path, or in
    the abstract namespace when $NOTIFY_SOCKET starts with '@'."""

    def __init__(self, address: str) -> None:
        self.address = address
        self._target = "\0" + address[1:] if address.startswith("@") else address
        self._socket = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
        self._socket.setblocking(False)  # a full receiver queue must never stall the daemon
        self._failing: int | None = None  # the errno of the last failed send, logged once

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None) -> NotifySocket | None:
        """The socket named by $NOTIFY_SOCKET; None when it is not set (not under systemd)
        or names a kind of socket this port does not speak (vsock:, ...), with a warning."""
        environ = os.environ if environ is None else environ
        address = environ.get("NOTIFY_SOCKET", "")
        if not address:
            return None
        if not (address.startswith("/") or address.startswith("@")):
            log.warning("NOTIFY_SOCKET=%s: only unix socket paths and @abstract names are supported; "
                        "not notifying systemd", address)  # fmt: skip
            return None
        return cls(address)

    def notify(self, *assignments: str) -> bool:
        """Send the assignments ("READY=1", "STATUS=...") in one datagram; False if it
        could not be sent (logged once per cause: systemd ignores a lost notification, and
        so does the daemon)."""
        try:
            self._socket.sendto("\n".join(assignments).encode(), self._target)
        except OSError as error:
            if error.errno != self._failing:
                self._failing = error.errno
                log.warning("notifying systemd at %s failed: %s", self.address,
                            os.strerror(error.errno) if error.errno else error)  # fmt: skip
            return False
        if self._failing is not None:
            log.info("notifying systemd at %s works again", self.address)
            self._failing = None
        return True

    def close(self) -> None:
        self._socket.close()


def watchdog_interval(environ: Mapping[str, str] | None = None, pid: int | None = None) -> float | None:
    """Seconds between two WATCHDOG=1 (half of $WATCHDOG_USEC, as Go's kubelet and systemd
    advise); None when systemd wants no watchdog pings from this process ($WATCHDOG_USEC
    unset, or $WATCHDOG_PID naming another process)."""
    environ = os.environ if environ is None else environ
    raw = environ.get("WATCHDOG_USEC", "")
    if not raw:
        return None
    try:
        usec = int(raw, 10)
    except ValueError:
        usec = 0
    if usec <= 0:
        raise WatchdogConfigError(f"WATCHDOG_USEC={raw}: not a positive number of microseconds "
                                  "(systemd sets it from WatchdogSec=); fix or unset it")  # fmt: skip
    owner = environ.get("WATCHDOG_PID", "")
    if owner and owner != str(os.getpid() if pid is None else pid):
        return None
    return usec / 1e6 / 2


__all__ = ["NotifySocket", "WatchdogConfigError", "watchdog_interval"]
