"""HTTP answers read within one deadline and up to a size: the fleet client's transport (docs/fleet.md,
"When Prometheus fails"; docs/SECURITY.md).

A socket timeout bounds each receive, not a whole answer: a server that sends a byte now and then
holds it off for as long as it likes, in the body (read here one receive at a time, the deadline
checked between) and in the status line and headers, which ``http.client`` reads itself. So each
request has a ``Watchdog``: at the deadline it shuts the request's socket down (every connection the
request opens is watched from its TCP connect on: a TLS handshake and a proxy's tunnel included), and
whatever read was waiting ends. Stdlib only.
"""

from __future__ import annotations

import contextlib
import http.client
import socket
import ssl
import threading
import time
import urllib.request
from collections.abc import Callable
from typing import Any

_CHUNK_BYTES = 1 << 16


class TooLarge(Exception):
    """The answer went past its bound."""


class Watchdog:
    """Shuts the sockets of one request down at ``deadline`` (``time.monotonic()``); ``fired`` says
    that it did, i.e. the request ran out of time, whatever error its reader saw then."""

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline
        self.fired = False
        self._timers: list[threading.Timer] = []
        self._lock = threading.Lock()

    def watch(self, sock: socket.socket) -> socket.socket:
        timer = threading.Timer(max(0.0, self.deadline - time.monotonic()), self._cut, (sock,))
        timer.daemon = True
        with self._lock:
            self._timers.append(timer)
        timer.start()
        return sock

    def _cut(self, sock: socket.socket) -> None:
        self.fired = True
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)

    def cancel(self) -> None:
        with self._lock:
            timers, self._timers = self._timers, []
        for timer in timers:
            timer.cancel()


def _watched(conn_class: type[http.client.HTTPConnection], watchdog: Watchdog) -> Any:
    """``conn_class`` whose sockets ``watchdog`` watches from their connect on (HTTPConnection makes
    its socket with ``self._create_connection``; HTTPSConnection wraps that one in TLS)."""
    base: Any = conn_class

    class Watched(base):
        _create_connection: Callable[..., socket.socket]

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            create = self._create_connection
            self._create_connection = lambda *a, **k: watchdog.watch(create(*a, **k))
    return Watched


def opener(watchdog: Watchdog, context: ssl.SSLContext | None = None) -> urllib.request.OpenerDirector:
    """urllib's usual opener (proxies from the environment included) whose connections ``watchdog``
    watches; ``context``: the TLS settings of https:// URLs (None: the system's CAs)."""
    class Http(urllib.request.HTTPHandler):
        def do_open(self, http_class: Any, req: Any, **kwargs: Any) -> Any:
            return super().do_open(_watched(http_class, watchdog), req, **kwargs)

    class Https(urllib.request.HTTPSHandler):
        def do_open(self, http_class: Any, req: Any, **kwargs: Any) -> Any:
            return super().do_open(_watched(http_class, watchdog), req, **kwargs)

    return urllib.request.build_opener(Http, Https(context=context))


def read(r: Any, limit: int, deadline: float, *, cut: bool = False) -> bytes:
    """``r``'s body, one receive at a time: TimeoutError past ``deadline``; beyond ``limit`` bytes,
    TooLarge, or with ``cut`` the first ``limit`` bytes."""
    body = bytearray()
    while True:
        if time.monotonic() > deadline:
            raise TimeoutError
        chunk = r.read1(_CHUNK_BYTES)
        if not chunk:
            return bytes(body)
        body += chunk
        if len(body) > limit:
            if cut:
                return bytes(body[:limit])
            raise TooLarge
