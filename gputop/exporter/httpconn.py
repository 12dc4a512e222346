"""The exporter's HTTP server's parts that hold no loop: its limits, a connection's state, the buffer a
handler writes its reply to, and the replies it sends without a handler (httpserver.py runs them)."""

from __future__ import annotations

import io
import socket
import ssl
from dataclasses import dataclass
from http import HTTPStatus
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from _typeshed import ReadableBuffer


@dataclass(frozen=True)
class Limits:
    max_connections: int = 64          # open at once: reading, queued, answered, being sent
    workers: int = 4                   # threads answering complete requests
    request_deadline_s: float = 5.0    # from accept to the head's last byte, however it trickles
    write_deadline_s: float = 10.0     # from the reply's first byte sent to its last
    stall_s: float = 2.0               # a reply's client that takes nothing this long is cut off
    max_per_address: int = 8           # open at once from one client address (503 beyond)
    max_request_line: int = 8192       # bytes, its line ending included (414 beyond)
    max_headers: int = 64              # header lines (431 beyond)
    max_head_bytes: int = 32768        # request line and headers (431 beyond)
    linger_s: float = 1.0              # after a refusal: drain what the client still sends this long
    linger_bytes: int = 1 << 20        # and at most this much


LIMITS = Limits()
#: a connection's state: reading its head, draining after a refusal, with a worker, sending its reply
READING, DRAINING, ANSWERING, SENDING = 0, 1, 2, 3


def canned(code: int) -> bytes:
    """A complete HTTP/1.0 reply with a one-line plain-text body."""
    reason = HTTPStatus(code).phrase
    body = f"{code} {reason}\n".encode()
    return (f"HTTP/1.0 {code} {reason}\r\nServer: gputop-exporter\r\nContent-Type: text/plain; charset=utf-8\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode() + body


class Conn:
    """An accepted connection: the I/O thread's while it reads its head, drains or sends its reply;
    a worker's between (``head`` set, ``out`` filled)."""

    __slots__ = ("addr", "buf", "deadline", "drain_left", "head", "host", "lines", "out", "progress", "scan",
                 "shaking", "sock", "started", "state")

    def __init__(self, sock: socket.socket, addr: Any, deadline: float) -> None:
        self.sock = sock
        self.addr = addr
        self.host = host_of(addr)
        self.deadline = deadline
        self.started = 0.0          # sending: when the reply's first byte went out, and its last progress
        self.progress = 0.0
        self.buf = bytearray()
        self.scan = 0               # where the line being read starts in buf
        self.lines = 0              # complete lines so far: the request line, then headers
        self.state = READING
        self.drain_left = 0
        self.head = b""
        self.out: list[memoryview] = []
        self.shaking = isinstance(sock, ssl.SSLSocket)     # TLS: its handshake first, within the head's deadline


class ReplyBuffer(io.BufferedIOBase):
    """A handler's ``wfile``: what it writes, kept for the I/O thread to send (bytes by reference)."""

    def __init__(self) -> None:
        super().__init__()
        self.chunks: list[memoryview] = []

    def writable(self) -> bool:
        return True

    def write(self, b: ReadableBuffer) -> int:
        view = memoryview(b if isinstance(b, bytes) else bytes(b)).cast("B")   # a mutable buffer: copied
        if view.nbytes:
            self.chunks.append(view)
        return view.nbytes


#: what one TLS send is given: one record's plaintext
TLS_RECORD = 16384


def host_of(addr: Any) -> str:
    """A client's address without its port (what ``max_per_address`` counts by)."""
    return str(addr[0]) if isinstance(addr, tuple) and addr else str(addr)


def send_quietly(sock: socket.socket, data: bytes) -> bool:
    """Send a short reply without blocking, as much as the socket takes; False if the client is gone."""
    try:
        sock.send(data)
    except (BlockingIOError, InterruptedError):
        return True
    except OSError:
        return False
    return True
