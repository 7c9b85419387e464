"""A fake systemd for tests: the receiving end of NOTIFY_SOCKET, a unix datagram socket at a
path or an @abstract name, read without blocking."""

from __future__ import annotations

import socket


class FakeSystemd:
    def __init__(self, address: str) -> None:
        self.address = address
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind("\0" + address[1:] if address.startswith("@") else address)
        self.sock.setblocking(False)

    def received(self) -> list[str]:
        """Every datagram received since the last call, one string each."""
        out = []
        while True:
            try:
                out.append(self.sock.recv(4096).decode())
            except BlockingIOError:
                return out

    def close(self) -> None:
        self.sock.close()
