"""This machine's address on its LAN: where phones reach a gateway listening on all interfaces."""

from __future__ import annotations

import socket

#: A non-routable address: connecting a UDP socket to it selects the outgoing interface
#: without sending a packet.
_PROBE_ADDR = ("10.254.254.254", 1)


def lan_address() -> str:
    """This machine's address on its LAN (the interface of the default route), else loopback."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(_PROBE_ADDR)  # UDP connect: a routing decision, no traffic
            address = str(s.getsockname()[0])
        except OSError:
            return "127.0.0.1"
    return "127.0.0.1" if address.startswith("0.") else address
