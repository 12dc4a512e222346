"""sd_notify(3) without libsystemd: one datagram per message to the unix socket in ``$NOTIFY_SOCKET``.

A path names a socket in the file system; a name starting with ``@`` is an abstract socket (its first
byte becomes NUL). Without ``$NOTIFY_SOCKET`` (not run by systemd with ``Type=notify``) every call does
nothing. Sending never raises: a supervisor that went away must not stop the exporter, and a message it
did not get is only lost. ``WATCHDOG_USEC`` is the watchdog systemd asks for (``WatchdogSec=``), when
``WATCHDOG_PID`` is unset or this process.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping


def socket_address(value: str | None) -> str | bytes | None:
    """The address to send to for a ``$NOTIFY_SOCKET`` value; None for none or one gputop cannot use
    (systemd's vsock addresses, a relative path)."""
    if not value:
        return None
    if value.startswith("@"):
        return b"\0" + value[1:].encode()
    if value.startswith("/"):
        return value
    return None


class Notifier:
    """Sends sd_notify messages; a no-op without a socket. Thread-safe: each send is one ``sendto``."""

    def __init__(self, address: str | bytes | None, watchdog_usec: int | None = None) -> None:
        self.address = address
        #: the watchdog's timeout systemd asked for, in microseconds (None: no watchdog)
        self.watchdog_usec = watchdog_usec
        self._sock: socket.socket | None = None
        if address is not None:
            try:
                self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
                self._sock.settimeout(1.0)      # a full queue delays the collector a second at most
            except OSError:
                self._sock = None

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None, unset: bool = False) -> Notifier:
        """The notifier ``$NOTIFY_SOCKET`` asks for; ``unset``: remove the variables from ``os.environ``
        so that no child process talks to systemd in the exporter's name."""
        env = os.environ if environ is None else environ
        address = socket_address(env.get("NOTIFY_SOCKET"))
        usec: int | None = None
        pid = env.get("WATCHDOG_PID", "")
        text = env.get("WATCHDOG_USEC", "")
        if text.isdigit() and int(text) > 0 and (not pid or pid == str(os.getpid())):
            usec = int(text)
        if unset:
            for key in ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID"):
                os.environ.pop(key, None)
        return cls(address, usec)

    @property
    def enabled(self) -> bool:
        return self._sock is not None

    def send(self, *fields: str) -> bool:
        """Send ``KEY=value`` fields as one message; whether it was sent."""
        sock, address = self._sock, self.address
        if sock is None or address is None or not fields:
            return False
        try:
            sock.sendto("\n".join(fields).encode(), address)
        except OSError:
            return False
        return True

    def ready(self, status: str | None = None) -> bool:
        return self.send("READY=1", *([f"STATUS={status}"] if status else []))

    def watchdog(self) -> bool:
        return self.send("WATCHDOG=1")

    def stopping(self) -> bool:
        return self.send("STOPPING=1")

    def close(self) -> None:
        sock, self._sock = self._sock, None
        if sock is not None:
            sock.close()
