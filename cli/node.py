"""The node's name and IP, found without any name lookup (a DNS query here would leave the
machine and stall): the name from --hostname-override or the kernel's host name, the IP
from --node-ip or the first non-loopback IPv4 address of the interfaces."""

from __future__ import annotations

import fcntl
import socket
import struct

_SIOCGIFADDR = 0x8915


def node_name(hostname_override: str | None) -> str:
    """Lowercased and trimmed, as the Go kubelet derives it."""
    return (hostname_override or socket.gethostname()).strip().lower()


def node_ip(node_ips: tuple[str, ...]) -> str:
    if node_ips:
        return node_ips[0]
    for _, interface in socket.if_nameindex():
        address = _ipv4_of(interface)
        if address and not address.startswith("127."):
            return address
    return "127.0.0.1"


def _ipv4_of(interface: str) -> str | None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        try:
            packed = fcntl.ioctl(sock.fileno(), _SIOCGIFADDR, struct.pack("256s", interface[:15].encode()))
        except OSError:
            return None  # no IPv4 address on this interface
    return socket.inet_ntoa(packed[20:24])
