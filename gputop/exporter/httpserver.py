"""A bounded HTTP/1.0 server for the exporter: whatever its clients do, its threads, descriptors and
memory stay under fixed caps, and a normal scrape is answered at once.

``http.server.ThreadingHTTPServer`` starts a thread per connection and reads each header line of up to
64 kB, a hundred of them, with a timeout per ``recv``: 66 connections of 99 lines of 65 kB held 461 MB,
and a few hundred connections trickling a byte every few seconds held a thread and a descriptor each
until the process ran out of descriptors. Here instead:

- one I/O thread (the caller of ``serve_forever``) does every socket operation without blocking
  (epoll): it accepts, reads each request head under a deadline for the whole head from the moment
  the connection was accepted (whatever it trickles), and sends each reply under a deadline for the
  whole reply (a client that does not read holds no thread);
- the head is capped: the request line (414), the number of header lines and the head's bytes (431);
  the answer to a refused head is sent at once, the connection half-closed and drained briefly (so
  the client reads the answer rather than a reset), then closed;
- at most ``max_connections`` connections are open at once (reading, queued, answered or being sent),
  and ``max_per_address`` from one client address (beyond: 503 at once). A connection beyond the cap
  evicts the oldest one still sending its head (a client that sends its request at once is never the
  oldest for long), else the one whose client has taken nothing of its reply for longest, if that is
  STALLED_S or more; when every open connection is busy, the new one is answered 503 and closed at
  once. A reply's client that takes nothing for ``stall_s`` loses its slot (a deadline by progress,
  beside the whole reply's): clients that ask and never read cannot hold the slots that Prometheus'
  scrapes and ``/healthz`` need (issue 40). The listen backlog is the kernel's, bounded by ``listen()``;
- a fixed pool of ``workers`` threads, started with ``serve_forever``, turns complete heads into
  replies in memory with the ``PreparsedRequestHandler`` given (a ``BaseHTTPRequestHandler`` reading
  the buffered head and writing to a buffer), and hands them back to the I/O thread. One request per
  connection (HTTP/1.0).

Threads: the I/O thread and ``workers``, no more. Descriptors: the listening socket, a socket pair that
wakes the I/O thread, and at most ``max_connections`` (one more for an instant while a connection beyond
the cap is refused). Memory: at most ``max_head_bytes`` + 1 of request head per connection, and each
reply being sent (a reply's body is the exporter's cached rendering, shared, not copied).
"""

from __future__ import annotations

import contextlib
import errno
import io
import queue
import selectors
import socket
import socketserver
import ssl
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

from gputop.exporter.httpconn import (
    ANSWERING,
    DRAINING,
    LIMITS,
    READING,
    SENDING,
    TLS_RECORD,
    Conn,
    Limits,
    ReplyBuffer,
    canned,
    host_of,
    send_quietly,
)

ACCEPT_BATCH = 16          # accepts per turn of the loop: the heads already accepted are read first
ACCEPT_PAUSE_S = 0.1       # accept() out of descriptors or memory: stop accepting this long
STALLED_S = 0.5            # a reply whose client took nothing this long may be evicted for a new connection
IDLE_WAIT_S = 30.0         # the longest wait of an idle I/O thread: shutdown() wakes it

class PreparsedRequestHandler(BaseHTTPRequestHandler):
    """``BaseHTTPRequestHandler`` over a head the server has already read and checked, writing its
    reply to a buffer the server sends. Subclass it with ``do_GET`` and friends as usual."""

    def __init__(self, sock: socket.socket, client_address: Any, server: BoundedHTTPServer, head: bytes,
                 out: ReplyBuffer) -> None:
        self._head = head
        self._out = out
        super().__init__(sock, client_address, server)

    def setup(self) -> None:
        self.connection = self.request
        self.rfile = io.BytesIO(self._head)
        self.wfile = self._out

    def finish(self) -> None:
        pass                        # the buffer is the server's to send; nothing to flush or close


class BoundedHTTPServer(HTTPServer):
    """See the module's docstring. ``serve_forever``, ``shutdown`` and ``server_close`` as in
    ``socketserver``; ``handler`` answers each request on a worker thread."""

    request_queue_size = 1024       # the listen backlog: the kernel's queue (capped by net.core.somaxconn)

    def __init__(self, address: tuple[str, int], handler: type[PreparsedRequestHandler], limits: Limits = LIMITS,
                 bind_and_activate: bool = True, tls: ssl.SSLContext | None = None) -> None:
        super().__init__(address, handler, bind_and_activate)
        self.limits = limits
        #: TLS (``--web.config.file``): every connection's handshake is done by the I/O thread without
        #: blocking, within the head's deadline, like the head itself
        self.tls = tls
        self._handler = handler
        self._lock = threading.Lock()
        self._open = 0                                  # accepted and not yet closed
        self._by_host: dict[str, int] = {}              # open connections by client address
        self._conns: dict[Conn, None] = {}             # reading or draining, in accept order: the oldest first
        self._sending: dict[Conn, None] = {}
        self._requests: queue.SimpleQueue[Conn | None] = queue.SimpleQueue()      # to the workers
        self._replies: queue.SimpleQueue[Conn] = queue.SimpleQueue()              # from the workers
        self._waker_r, self._waker_w = socket.socketpair()
        self._waker_r.setblocking(False)
        self._waker_w.setblocking(False)
        self._workers: list[threading.Thread] = []
        self._scratch = bytearray(65536)                # drained bytes land here
        self._stop = threading.Event()
        self._idle = threading.Event()
        self._idle.set()
        #: refusals so far, by reason: "full" (503 at accept), "evicted", "deadline" (408),
        #: "write-deadline", "414", "431", "accept-EMFILE"...
        self.refused: dict[str, int] = {}

    def server_bind(self) -> None:
        """HTTPServer's, without its reverse DNS lookup of the address (``server_name`` is unused
        here, and a lookup the unit's IPAddressDeny= drops would hold up the start)."""
        socketserver.TCPServer.server_bind(self)
        self.server_name = str(self.server_address[0])
        self.server_port = int(self.server_address[1])

    def server_close(self) -> None:
        super().server_close()
        for sock in (getattr(self, "_waker_r", None), getattr(self, "_waker_w", None)):
            if sock is not None:                # absent when binding failed in the constructor
                sock.close()

    @property
    def open_connections(self) -> int:
        with self._lock:
            return self._open

    # -- the I/O thread -------------------------------------------------------------------------

    def serve_forever(self, poll_interval: float = IDLE_WAIT_S) -> None:
        """Serve until ``shutdown``, which wakes the I/O thread: ``poll_interval`` is only the longest
        wait of an idle server (no wake-up every half second: issue 38 item 7, the exporter's cost)."""
        self._idle.clear()
        sel = selectors.DefaultSelector()
        try:
            self._start_workers()
            self.socket.setblocking(False)
            sel.register(self.socket, selectors.EVENT_READ, None)
            sel.register(self._waker_r, selectors.EVENT_READ, self._waker_r)
            listening, resume_at = True, 0.0
            while not self._stop.is_set():
                now = time.monotonic()
                if not listening and now >= resume_at:
                    sel.register(self.socket, selectors.EVENT_READ, None)
                    listening = True
                timeout = poll_interval if listening else min(poll_interval, resume_at - now)
                for c in (*self._conns, *self._sending):
                    timeout = min(timeout, c.deadline - now)
                accept = False
                for key, _events in sel.select(max(timeout, 0.0)):
                    if key.data is None:
                        accept = True
                    elif key.data is self._waker_r:
                        self._take_replies(sel)
                    elif key.data.state == SENDING:
                        self._send(sel, key.data)
                    else:
                        self._on_readable(sel, key.data)
                if accept and not self._accept(sel):
                    sel.unregister(self.socket)
                    listening, resume_at = False, time.monotonic() + ACCEPT_PAUSE_S
                self._expire(sel, time.monotonic())
        finally:
            for c in (*self._conns, *self._sending):
                self._close(sel, c)
            sel.close()
            self._stop_workers()
            self._stop.clear()
            self._idle.set()

    def shutdown(self) -> None:
        """Stop ``serve_forever`` and wait for it to return (at once if it is not running)."""
        self._stop.set()
        with contextlib.suppress(OSError):              # full: the I/O thread is already woken
            self._waker_w.send(b"\0")
        self._idle.wait()

    def _count(self, reason: str) -> None:
        self.refused[reason] = self.refused.get(reason, 0) + 1

    def _accept(self, sel: selectors.BaseSelector) -> bool:
        """Accept what is waiting, up to a batch; False: out of descriptors or memory (pause)."""
        limits = self.limits
        for _ in range(ACCEPT_BATCH):
            try:
                sock, addr = self.socket.accept()
            except (BlockingIOError, InterruptedError):
                return True
            except OSError as e:
                if e.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    self._count("accept-" + (errno.errorcode.get(e.errno or 0) or "error"))
                    return False
                continue                                # ECONNABORTED and the like: that client left
            sock.setblocking(False)
            host = host_of(addr)
            with self._lock:
                full = self._open >= limits.max_connections
                crowded = self._by_host.get(host, 0) >= limits.max_per_address
            if crowded:                                 # that address holds its share already
                self._count("per-address")
                self._turn_away(sock)
                continue
            if full:
                victim = self._victim(time.monotonic())
                if victim is None:                      # every slot is busy: refuse this one
                    self._count("full")
                    self._turn_away(sock)
                    continue
                self._count("evicted")
                self._close(sel, victim, 503 if victim.state == READING else None)
            if self.tls is not None:            # its handshake comes first, done by this thread a step at a time
                try:
                    sock = self.tls.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
                except (ssl.SSLError, OSError):
                    self._count("tls")
                    with contextlib.suppress(OSError):
                        sock.close()
                    continue
            with self._lock:
                self._open += 1
                self._by_host[host] = self._by_host.get(host, 0) + 1
            c = Conn(sock, addr, time.monotonic() + limits.request_deadline_s)
            self._conns[c] = None
            sel.register(sock, selectors.EVENT_READ, c)
        return True

    def _victim(self, now: float) -> Conn | None:
        """The connection a new one may take the slot of: the oldest still sending its head (or
        draining), else the reply whose client has taken nothing for longest, STALLED_S or more."""
        victim = next(iter(self._conns), None)
        if victim is not None:
            return victim
        stalled = min(self._sending, key=lambda c: c.progress, default=None)
        return stalled if stalled is not None and now - stalled.progress >= STALLED_S else None

    def _handshake(self, sel: selectors.BaseSelector, c: Conn) -> bool:
        """A TLS connection's handshake, a step at a time as its bytes come; True once done. A client that
        does not speak TLS, or whose certificate is refused, is closed (counted ``tls``)."""
        sock = c.sock
        assert isinstance(sock, ssl.SSLSocket)
        try:
            sock.do_handshake()
        except ssl.SSLWantReadError:
            sel.modify(sock, selectors.EVENT_READ, c)
            return False
        except ssl.SSLWantWriteError:
            sel.modify(sock, selectors.EVENT_READ | selectors.EVENT_WRITE, c)
            return False
        except (ssl.SSLError, OSError):
            self._count("tls")
            self._close(sel, c)
            return False
        c.shaking = False
        sel.modify(sock, selectors.EVENT_READ, c)
        return True

    def _on_readable(self, sel: selectors.BaseSelector, c: Conn) -> None:
        if c.shaking and not self._handshake(sel, c):
            return
        if c.state == DRAINING:
            try:
                n = c.sock.recv_into(self._scratch)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                n = 0
            c.drain_left -= n
            if n == 0 or c.drain_left <= 0:
                self._close(sel, c)
            return
        room = self.limits.max_head_bytes + 1 - len(c.buf)     # one byte past the cap says "too long"
        try:
            data = c.sock.recv(max(room, 1))
            if isinstance(c.sock, ssl.SSLSocket):               # the rest of a TLS record already decrypted:
                while (more := c.sock.pending()) and len(data) < room:   # epoll will not say so
                    data += c.sock.recv(min(more, room - len(data)))
        except (BlockingIOError, InterruptedError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
            return
        except OSError:
            data = b""
        if not data:                # end of file: a complete request line and the headers so far make a
            if c.lines == 0:        # request (as http.server reads one); otherwise, or a reset: nothing
                self._close(sel, c)
                return
            verdict: int | None = -c.scan
        else:
            c.buf += data
            verdict = self._scan(c)
        if verdict is None:
            return
        if verdict > 0:                               # a refusal: its status code
            self._count(str(verdict))
            self._refuse(sel, c, verdict)
            return
        end = -verdict                                 # the head is complete: hand it to a worker
        sel.unregister(c.sock)
        del self._conns[c]
        c.head, c.buf, c.state = bytes(c.buf[:end]), bytearray(), ANSWERING
        self._requests.put(c)

    def _scan(self, c: Conn) -> int | None:
        """None: the head goes on; a positive status code: refuse it; minus the head's length: complete."""
        limits, buf = self.limits, c.buf
        while True:
            nl = buf.find(b"\n", c.scan)
            if nl < 0:
                break
            length = nl + 1 - c.scan
            if c.lines == 0:
                if length > limits.max_request_line:
                    return 414
                if len(buf[c.scan:nl + 1].split()) < 3:
                    return -(nl + 1)        # empty (the handler closes it) or HTTP/0.9: no headers follow
            elif length <= 2 and buf[c.scan:nl + 1] in (b"\n", b"\r\n"):
                return 431 if nl + 1 > limits.max_head_bytes else -(nl + 1)
            elif c.lines > limits.max_headers:
                return 431
            c.lines += 1
            c.scan = nl + 1
        if c.lines == 0 and len(buf) - c.scan > limits.max_request_line:
            return 414
        if len(buf) > limits.max_head_bytes:
            return 431
        return None

    def _refuse(self, sel: selectors.BaseSelector, c: Conn, code: int) -> None:
        """Answer ``code`` at once, half-close, and drain what the client still sends for a moment, so
        that it reads the answer rather than a reset; then close."""
        if not send_quietly(c.sock, canned(code)):
            self._close(sel, c)
            return
        try:
            c.sock.shutdown(socket.SHUT_WR)
        except OSError:
            self._close(sel, c)
            return
        c.state, c.buf = DRAINING, bytearray()
        c.deadline = time.monotonic() + self.limits.linger_s
        c.drain_left = self.limits.linger_bytes

    def _turn_away(self, sock: socket.socket) -> None:
        """A connection refused at accept: 503 at once in plain HTTP; with TLS, closed (an answer needs a
        handshake, which costs the server most of its work just when it is overloaded)."""
        if self.tls is None:
            self._answer_and_close(sock, 503)
            return
        with contextlib.suppress(OSError):
            sock.close()

    def _answer_and_close(self, sock: socket.socket, code: int) -> None:
        """A last answer before closing at once: what the client sent and nobody read is read first
        (a little, without blocking), so that closing sends the answer and an end of file rather than
        a reset that can discard the answer on the client's side."""
        with contextlib.suppress(OSError):
            for _ in range(4):
                if not sock.recv_into(self._scratch):
                    break
        if send_quietly(sock, canned(code)):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_WR)
        with contextlib.suppress(OSError):
            sock.close()

    def _take_replies(self, sel: selectors.BaseSelector) -> None:
        with contextlib.suppress(OSError):
            while self._waker_r.recv(4096):
                pass
        while True:
            try:
                c = self._replies.get_nowait()
            except queue.Empty:
                return
            now = time.monotonic()
            c.state, c.started, c.progress = SENDING, now, now
            c.deadline = now + min(self.limits.write_deadline_s, self.limits.stall_s)
            self._sending[c] = None
            sel.register(c.sock, selectors.EVENT_WRITE, c)
            self._send(sel, c)

    def _send(self, sel: selectors.BaseSelector, c: Conn) -> None:
        tls = isinstance(c.sock, ssl.SSLSocket)
        while c.out:
            try:
                # TLS sends all of what it is given or nothing: a record at a time, so that progress is seen
                # (and a retry after SSLWantWrite passes the same bytes, as OpenSSL asks)
                n = c.sock.send(c.out[0][:TLS_RECORD] if tls else c.out[0])
            except (BlockingIOError, InterruptedError, ssl.SSLWantWriteError, ssl.SSLWantReadError):
                return
            except OSError:
                break                                   # the client is gone
            if n > 0:
                now = time.monotonic()
                c.progress = now
                c.deadline = min(c.started + self.limits.write_deadline_s, now + self.limits.stall_s)
            if n < c.out[0].nbytes:
                c.out[0] = c.out[0][n:]
                return
            c.out.pop(0)
        self._close(sel, c)

    def _expire(self, sel: selectors.BaseSelector, now: float) -> None:
        for c in [c for c in (*self._conns, *self._sending) if c.deadline <= now]:
            if c.state == READING:
                self._count("deadline")
            elif c.state == SENDING:
                whole = c.started + self.limits.write_deadline_s <= now
                self._count("write-deadline" if whole else "stalled")
            self._close(sel, c, 408 if c.state == READING else None)

    def _close(self, sel: selectors.BaseSelector, c: Conn, answer: int | None = None) -> None:
        with contextlib.suppress(KeyError, ValueError):
            sel.unregister(c.sock)
        self._conns.pop(c, None)
        self._sending.pop(c, None)
        c.out = []
        if answer is not None and not c.shaking:    # mid-handshake: nothing can be said (nor worth the work)
            self._answer_and_close(c.sock, answer)
        self._release(c)

    def _release(self, c: Conn) -> None:
        with contextlib.suppress(OSError):
            c.sock.close()
        with self._lock:
            self._open -= 1
            left = self._by_host.pop(c.host, 0) - 1
            if left > 0:
                self._by_host[c.host] = left

    # -- the workers ----------------------------------------------------------------------------

    def _start_workers(self) -> None:
        self._workers = [threading.Thread(target=self._work, name=f"gputop-http-{i}", daemon=True)
                         for i in range(self.limits.workers)]
        for t in self._workers:
            t.start()

    def _stop_workers(self) -> None:
        for q in (self._requests, self._replies):      # heads not answered, replies not sent: closed
            while True:
                try:
                    c = q.get_nowait()
                except queue.Empty:
                    break
                if c is not None:
                    self._release(c)
        for _ in self._workers:
            self._requests.put(None)
        deadline = time.monotonic() + 1.0
        for t in self._workers:
            t.join(max(deadline - time.monotonic(), 0.0))
        self._workers = []

    def _work(self) -> None:
        while True:
            c = self._requests.get()
            if c is None:
                return
            out = ReplyBuffer()
            try:
                self._handler(c.sock, c.addr, self, c.head, out)
            except Exception as e:      # a bug in a handler: one line, a 500 if nothing was written yet
                print(f"gputop: exporter: answering a request failed: {type(e).__name__}: {e}",
                      file=sys.stderr, flush=True)
                if not out.chunks:
                    out.write(canned(500))
            c.out = out.chunks
            self._replies.put(c)
            with contextlib.suppress(OSError):          # full: the I/O thread is already woken
                self._waker_w.send(b"\0")
