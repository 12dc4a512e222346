"""Hostile network clients against the exporter's HTTP side (issue 25, "hostile tenants", item 4), on
loopback only (127.0.0.1). Every attack is bounded in connections, bytes and time, and stops by itself.

The first two run the real ``gputop exporter --no-bpf --no-nvml`` as a subprocess and read its memory,
threads and descriptors from /proc/PID: a flood of huge header lines (66 connections x 99 lines x
65 kB: 461 MB and an OOM kill before) and slowloris (hundreds of connections trickling a byte a
second: a thread and a descriptor each until the descriptors ran out, before). The rest drive
``make_server`` in-process with small limits, for each cap's exact answer."""

from __future__ import annotations

import contextlib
import errno
import os
import resource
import select
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily, Metric
from promserver import free_port, http_get, wait_until
from support import ROOT

from gputop.exporter.metrics import ExportOptions, SnapshotCollector
from gputop.model import Snapshot, SourceStatus

LOOPBACK = "127.0.0.1"
MiB = 1 << 20


# -- the real exporter, as a subprocess --------------------------------------------------------------

@dataclass
class Exporter:
    proc: subprocess.Popen[str]
    port: int

    @property
    def url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    def status(self) -> dict[str, str]:
        with open(f"/proc/{self.proc.pid}/status") as f:
            return dict(line.rstrip("\n").split(":\t", 1) for line in f if ":\t" in line)

    def kib(self, key: str) -> int:
        return int(self.status()[key].split()[0])

    def threads(self) -> int:
        return int(self.status()["Threads"])

    def fds(self) -> int:
        return len(os.listdir(f"/proc/{self.proc.pid}/fd"))


@contextlib.contextmanager
def exporter(nofile: int | None = None) -> Iterator[Exporter]:
    """``gputop exporter`` on a free loopback port, healthy; SIGTERM at the end, which must exit 0 with
    nothing on stderr but its own lines (no traceback, whatever the clients did)."""
    port = free_port()

    def limit() -> None:
        if nofile is not None:
            resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))

    proc = subprocess.Popen([sys.executable, "-m", "gputop.cli", "exporter", "--no-bpf", "--no-nvml", "-d", "1",
                             "--listen", f"{LOOPBACK}:{port}"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=ROOT, preexec_fn=limit)
    exp = Exporter(proc, port)
    try:
        def healthy() -> bool:
            assert proc.poll() is None, f"the exporter exited: {proc.communicate()[1]}"
            return http_get(exp.url + "/healthz", 2.0)[0] == 200
        wait_until("the exporter's /healthz", healthy, 30.0)
        yield exp
        assert proc.poll() is None, f"the exporter died under attack: {proc.communicate()[1]}"
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            _out, err = proc.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            _out, err = proc.communicate()
    assert proc.returncode == 0, err
    assert "Traceback" not in err, err


def timed_get(url: str, timeout_s: float = 10.0) -> tuple[int, float]:
    t0 = time.monotonic()
    with urllib.request.urlopen(url, timeout=timeout_s) as r:
        r.read()
        return r.status, time.monotonic() - t0


def reply_status(data: bytes) -> int | None:
    parts = data.split(b"\r\n", 1)[0].split()
    return int(parts[1]) if len(parts) >= 2 and parts[1].isdigit() else None


class Sampler:
    """Samples a /proc figure of the server every ``step_s`` on a thread; the largest seen."""

    def __init__(self, read: dict[str, object], step_s: float = 0.02) -> None:
        self._read = read
        self.most: dict[str, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(step_s,), daemon=True)

    def _run(self, step_s: float) -> None:
        while not self._stop.is_set():
            for name, fn in self._read.items():
                with contextlib.suppress(OSError, ValueError, KeyError):
                    value = fn()  # type: ignore[operator]
                    self.most[name] = max(self.most.get(name, value), value)
            self._stop.wait(step_s)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)


def header_flood(port: int, conns: int, lines: int, line_bytes: int, timeout_s: float) -> list[int | None]:
    """``conns`` connections at once, each sending a request head of ``lines`` header lines of
    ``line_bytes`` that never ends (a server that reads line by line holds them all while it waits for
    the rest), then waiting for an answer until ``timeout_s``: the status each got back (None: closed
    or reset without one). They come from 127.0.3.x, a few each: a crowd, not one address (which the
    server holds to ``max_per_address``)."""
    payload = (b"GET /metrics HTTP/1.1\r\nHost: x\r\n"
               + b"".join(b"X-Flood-%02d: " % i + b"a" * line_bytes + b"\r\n" for i in range(lines)))
    got: list[int | None] = [None] * conns
    deadline = time.monotonic() + timeout_s

    def one(i: int) -> None:
        try:
            with socket.create_connection((LOOPBACK, port), timeout=timeout_s,
                                          source_address=(f"127.0.3.{i % 50 + 1}", 0)) as s:
                with contextlib.suppress(OSError):
                    s.sendall(payload)
                s.settimeout(max(deadline - time.monotonic(), 0.1))
                got[i] = reply_status(s.recv(256))
        except OSError:
            pass

    threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(conns)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(max(deadline - time.monotonic(), 0.1) + 1)
    return got


@dataclass
class Trickle:
    sock: socket.socket
    since: float
    connected: bool = False


@dataclass
class Slowloris:
    """``n`` connections that send a request line and then one byte of a header that never ends every
    ``step_s``; a connection the server closes is opened again at the next step. Connecting does not
    block (the kernel retries what a full listen backlog drops), so the attack keeps ``n`` going. They
    come from ``sources`` loopback addresses (127.0.2.x) in turn: a crowd, not one address, which the
    server holds to ``max_per_address``."""

    port: int
    n: int
    step_s: float = 1.0
    sources: int = 100
    open: list[Trickle] = field(default_factory=list)
    lifetimes: list[float] = field(default_factory=list)    # of those the server closed, from connected
    connects: int = 0
    connect_failures: int = 0

    def _connect(self) -> None:
        self.connects += 1
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.bind((f"127.0.2.{self.connects % self.sources + 1}", 0))
        s.setblocking(False)
        if s.connect_ex((LOOPBACK, self.port)) not in (0, errno.EINPROGRESS):
            self.connect_failures += 1
            s.close()
            return
        self.open.append(Trickle(s, time.monotonic()))

    def step(self, reopen: bool = True) -> None:
        """One round: find the connections the server closed, trickle a byte on the others, reopen."""
        now = time.monotonic()
        readable, writable = set(), set()
        for i in range(0, len(self.open), 500):
            chunk = [t.sock for t in self.open[i:i + 500]]
            r, w, _ = select.select(chunk, [t.sock for t in self.open[i:i + 500] if not t.connected], [], 0)
            readable.update(r)
            writable.update(w)
        still: list[Trickle] = []
        for t in self.open:
            closed = t.sock in readable         # a 408/503, end of file or reset: the server is done with it
            if not t.connected and not closed:
                if t.sock in writable and not t.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR):
                    t.connected, t.since = True, now
                    data = b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Trickle: "
                elif t.sock in writable or now - t.since > 3.0:
                    self.connect_failures += 1
                    t.sock.close()
                    continue
                else:
                    still.append(t)
                    continue
            else:
                data = b"a"
            if not closed:
                try:
                    t.sock.send(data)
                except OSError:
                    closed = True
            if closed:
                if t.connected:
                    self.lifetimes.append(now - t.since)
                else:
                    self.connect_failures += 1
                t.sock.close()
            else:
                still.append(t)
        self.open = still
        while reopen and len(self.open) < self.n:
            self._connect()

    def close(self) -> None:
        for t in self.open:
            t.sock.close()
        self.open = []


def test_a_flood_of_huge_header_lines_keeps_the_exporters_memory_bounded() -> None:
    """66 connections x 99 header lines x 65 kB (424 MB sent): the server's resident memory grows by
    less than 64 MiB (it grew 461 MB and was killed), no such request is answered as valid, and a
    normal scrape still answers."""
    with exporter() as exp:
        assert timed_get(exp.url + "/metrics")[0] == 200
        rss0, hwm0 = exp.kib("VmRSS"), exp.kib("VmHWM")
        with Sampler({"rss": lambda: exp.kib("VmRSS")}) as sampled:
            got = header_flood(exp.port, conns=66, lines=99, line_bytes=65_000, timeout_s=15.0)
        growth = (max(sampled.most["rss"], exp.kib("VmRSS")) - rss0) * 1024
        hwm_growth = (exp.kib("VmHWM") - hwm0) * 1024
        print(f"\nheader flood: RSS {rss0 // 1024} MiB -> at most {sampled.most['rss'] // 1024} MiB "
              f"(+{growth / MiB:.1f} MiB; VmHWM +{hwm_growth / MiB:.1f} MiB); replies {sorted(set(got), key=str)}")
        assert growth < 64 * MiB and hwm_growth < 64 * MiB
        assert set(got) <= {None, 431, 503}, got                # none read in full and answered
        assert got.count(431) >= len(got) // 2, got            # most clients read why
        status, took = timed_get(exp.url + "/metrics")
        assert status == 200 and took < 5.0


def test_slowloris_keeps_threads_and_descriptors_under_the_caps() -> None:
    """300 connections trickling a byte a second, each reopened when the server closes it, for 9 s,
    against an exporter with only 256 descriptors: its threads stay exactly the pool and the fixed
    ones, its descriptors within the connection cap, a normal scrape answers within a few seconds
    throughout, and every trickling connection is closed by the whole-request deadline (before: a
    thread per connection, the descriptors exhausted, the collector dead of EMFILE)."""
    with exporter(nofile=256) as exp:
        assert timed_get(exp.url + "/metrics")[0] == 200
        threads0, fds0 = exp.threads(), exp.fds()
        attack = Slowloris(exp.port, n=300)
        scrapes: list[float] = []
        try:
            with Sampler({"threads": exp.threads, "fds": exp.fds}, step_s=0.05) as sampled:
                end = time.monotonic() + 9.0
                while time.monotonic() < end:
                    attack.step()
                    status, took = timed_get(exp.url + "/metrics")
                    assert status == 200
                    scrapes.append(took)
                    time.sleep(max(0.0, attack.step_s - took))
                # stop reopening; the last ones must end by the deadline too
                settle = time.monotonic() + 6.5          # the deadline (5 s) and a step
                while attack.open and time.monotonic() < settle:
                    attack.step(reopen=False)
                    time.sleep(0.25)
                left = len(attack.open)
        finally:
            attack.close()
        most_threads, most_fds = sampled.most["threads"], sampled.most["fds"]
        print(f"\nslowloris: {attack.connects} connections ({attack.connect_failures} closed before their first "
              f"byte); threads "
              f"{threads0} -> at most {most_threads}; fds {fds0} -> at most {most_fds}; scrapes at most "
              f"{max(scrapes, default=0):.2f} s; lifetimes at most {max(attack.lifetimes, default=0):.2f} s")
        assert most_threads == threads0
        from gputop.exporter.httpserver import LIMITS

        # main, the collector, the HTTP I/O thread, and the pool: nothing else starts per connection
        assert threads0 == 3 + LIMITS.workers
        # the cap, plus one socket for an instant while a connection beyond it is refused, plus two
        # for files the collector may have open as it reads /proc (psutil)
        assert fds0 + LIMITS.max_connections <= most_fds + 3          # the cap was reached...
        assert most_fds <= fds0 + LIMITS.max_connections + 3          # ...and held
        assert max(scrapes) < 3.0
        assert left == 0
        assert max(attack.lifetimes) < LIMITS.request_deadline_s + 1.5
        assert exp.fds() <= fds0 + 2 and exp.threads() == threads0


def test_garbage_and_resets_from_clients_never_print_a_traceback() -> None:
    """Binary heads, a TLS handshake, NULs, Latin-1 and UTF-8 paths, resets in the middle of a head and
    right after a request for /metrics: each is answered or closed, the exporter stays up, and its
    stderr holds no traceback (checked as it exits)."""
    import random
    import struct

    rng = random.Random(25)
    heads = [bytes(rng.randrange(256) for _ in range(n)) for n in (1, 17, 300, 9000, 40_000)]
    heads += [b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + bytes(500),     # a TLS ClientHello
              b"GET /\x00\x01 HTTP/1.0\r\n\r\n", "GET /m\u00e9triques HTTP/1.0\r\n\r\n".encode(),
              b"GET /metrics HTTP/1.0\r\nX: \xff\xfe\r\n\r\n", b"GET /metrics HTTP/9.9\r\n\r\n",
              b"GET /metrics HTTP/1.0\r\n folded\r\n\r\n", b"GET /metrics HTTP/1.1\r\nExpect: 100-continue\r\n\r\n"]
    with exporter() as exp:
        clients = [threading.Thread(target=raw_exchange, args=(exp.port, head, 10.0, half), daemon=True)
                   for head in heads for half in (False, True)]     # at once: some wait out the deadline
        for t in clients:
            t.start()
        for t in clients:
            t.join(15)
        for head in (b"GET /metrics HTTP/1.0\r\n\r\n", b"GET /metrics HTTP/1.0\r\nX: a", b"GET"):
            for _ in range(20):                 # reset at once: the reply, if any, meets a reset connection
                with socket.create_connection((LOOPBACK, exp.port), timeout=5) as s:
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    s.sendall(head)
        # from another address: this one may still hold its share of connections the server has
        # not seen reset yet (max_per_address)
        assert _answer_from("127.0.0.2", exp.port, b"GET /metrics HTTP/1.0\r\n\r\n") == 200


# -- make_server in-process, small limits ------------------------------------------------------------

class Gate:
    """A collector whose rendering waits for ``release``: requests pile up past their heads."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.waiting = threading.Event()

    def collect(self) -> Iterator[Metric]:
        self.waiting.set()
        self.release.wait(10)
        yield GaugeMetricFamily("gate", "gate", value=1)


class Big:
    """A collector of 100,000 series: an 8 MB exposition, more than a socket's buffers hold."""

    def collect(self) -> Iterator[Metric]:
        g = GaugeMetricFamily("big", "big", labels=["i"])
        for n in range(100_000):
            g.add_metric(["x" * 60 + str(n)], n)
        yield g


@contextlib.contextmanager
def server(gate: Gate | Big | None = None, **limits: object) -> Iterator[tuple[object, int]]:
    from gputop.exporter.httpserver import Limits
    from gputop.exporter.server import make_server

    c = SnapshotCollector(ExportOptions())
    c.update(Snapshot(time=time.time(), interval_s=1.0, host="n", sources={"bpf": SourceStatus("ok")}))
    reg = CollectorRegistry(auto_describe=False)
    if gate is not None:
        reg.register(gate)  # type: ignore[arg-type]
    srv = make_server(LOOPBACK, 0, reg, c, limits=Limits(**limits))  # type: ignore[arg-type]
    t = threading.Thread(target=srv.serve_forever, args=(0.05,), daemon=True)
    t.start()
    try:
        assert exchange(srv.server_port, b"GET /healthz HTTP/1.0\r\n\r\n") == 200     # serving, pool started
        yield srv, srv.server_port
    finally:
        if isinstance(gate, Gate):
            gate.release.set()
        srv.shutdown()
        srv.server_close()
        t.join(5)


def raw_exchange(port: int, request: bytes, timeout_s: float = 5.0, half_close: bool = False) -> bytes:
    with socket.create_connection((LOOPBACK, port), timeout=timeout_s) as s:
        with contextlib.suppress(OSError):
            s.sendall(request)
            if half_close:
                s.shutdown(socket.SHUT_WR)
        data = b""
        with contextlib.suppress(OSError):
            while chunk := s.recv(4096):
                data += chunk
        return data


def exchange(port: int, request: bytes, timeout_s: float = 5.0, half_close: bool = False) -> int | None:
    return reply_status(raw_exchange(port, request, timeout_s, half_close))


def test_normal_requests_are_answered_as_before() -> None:
    with server() as (_srv, port):
        assert exchange(port, b"GET /healthz HTTP/1.1\r\nHost: x\r\nAccept: */*\r\n\r\n") == 200
        assert exchange(port, b"GET /metrics HTTP/1.0\r\n\r\n") == 200
        assert exchange(port, b"GET /nothing HTTP/1.0\n\n") == 404             # bare line feeds, as before
        assert exchange(port, b"POST /metrics HTTP/1.0\r\nContent-Length: 0\r\n\r\n") == 501
        assert exchange(port, b"BREW /pot HTTP/1.0\r\n\r\n") == 501
        # a head ended by the end of the stream, not an empty line, as http.server read it
        assert exchange(port, b"GET /healthz HTTP/1.0\r\nAccept: */*\r\n", half_close=True) == 200
        assert raw_exchange(port, b"GET /healthz\r\n").startswith(b'{"status": "ok"')     # HTTP/0.9
        assert raw_exchange(port, b"\r\n") == b""                                       # nothing to answer


@pytest.mark.parametrize(("what", "request_", "code"), [
    ("a request line of 10 kB", b"GET /" + b"a" * 10_000 + b" HTTP/1.0\r\n\r\n", 414),
    ("a request line of 10 kB, unfinished", b"GET /" + b"a" * 10_000, 414),
    ("65 header lines", b"GET / HTTP/1.0\r\n" + b"X: y\r\n" * 65 + b"\r\n", 431),
    ("40 kB of headers", b"GET / HTTP/1.0\r\n" + (b"X: " + b"y" * 2000 + b"\r\n") * 20 + b"\r\n", 431),
    ("99 header lines of 1 kB", b"GET / HTTP/1.0\r\n" + (b"X: " + b"y" * 1000 + b"\r\n") * 99 + b"\r\n", 431),
    ("one header line of 64 kB, unfinished", b"GET / HTTP/1.0\r\nX: " + b"y" * 65_000, 431),
])
def test_oversized_heads_are_refused_with_the_reason(what: str, request_: bytes, code: int) -> None:
    with server() as (srv, port):
        assert exchange(port, request_) == code, what
        assert exchange(port, b"GET /healthz HTTP/1.0\r\n\r\n") == 200
        assert srv.refused == {str(code): 1}  # type: ignore[attr-defined]


def test_the_largest_head_allowed_is_answered() -> None:
    from gputop.exporter.httpserver import LIMITS

    line = b"GET /healthz?" + b"q" * (LIMITS.max_request_line - len(b"GET /healthz? HTTP/1.0\r\n")) + b" HTTP/1.0\r\n"
    assert len(line) == LIMITS.max_request_line
    headers = b"".join(b"X-%02d: v\r\n" % i for i in range(LIMITS.max_headers))
    with server() as (_srv, port):
        assert exchange(port, line + headers + b"\r\n") == 200


def test_a_trickling_client_is_cut_off_by_the_deadline_for_the_whole_request() -> None:
    """A byte every 0.2 s never lets a recv time out; the head's deadline (1 s here) still ends it."""
    with server(request_deadline_s=1.0) as (srv, port), \
            socket.create_connection((LOOPBACK, port), timeout=5) as s:
        t0 = time.monotonic()
        s.sendall(b"GET /metrics HTTP/1.0\r\nX: ")
        s.setblocking(False)
        data = b""
        while time.monotonic() - t0 < 5:
            if select.select([s], [], [], 0.2)[0]:
                with contextlib.suppress(OSError):
                    data = s.recv(4096)
                break
            with contextlib.suppress(OSError):
                s.send(b"a")
        took = time.monotonic() - t0
        assert reply_status(data) == 408 and 0.9 < took < 1.6, (data, took)
        assert srv.refused == {"deadline": 1}  # type: ignore[attr-defined]


def test_a_connection_beyond_the_cap_evicts_the_oldest_unfinished_one() -> None:
    """Three connections that never finish their heads hold every slot; a normal client still gets
    in, at the oldest one's expense (a 503, then closed)."""
    with server(max_connections=3) as (srv, port):
        idle = [socket.create_connection((LOOPBACK, port), timeout=5) for _ in range(3)]
        try:
            for s in idle:
                s.sendall(b"GET / HTTP/1.0\r\n")
            wait_until("three open connections", lambda: srv.open_connections == 3, 5)  # type: ignore[attr-defined]
            assert exchange(port, b"GET /healthz HTTP/1.0\r\n\r\n") == 200
            assert reply_status(idle[0].recv(4096)) == 503 and idle[0].recv(10) == b""
            assert select.select(idle[1:], [], [], 0.2)[0] == []                # the others go on
            assert srv.refused == {"evicted": 1}  # type: ignore[attr-defined]
        finally:
            for s in idle:
                s.close()


def test_when_every_slot_is_past_its_head_a_new_connection_gets_503_at_once() -> None:
    """One worker stuck rendering and two requests queued behind it fill the cap of three: the fourth
    connection is answered 503 at once (not queued); the three are answered once rendering goes on."""
    gate = Gate()
    with server(gate, max_connections=3, workers=1) as (srv, port):
        results: list[int | None] = []
        clients = [threading.Thread(target=lambda: results.append(exchange(port, b"GET /metrics HTTP/1.0\r\n\r\n")))
                   for _ in range(3)]
        for t in clients:
            t.start()
        assert gate.waiting.wait(5)
        # all three past their heads (none left reading one: a fourth would evict such a one instead)
        wait_until("three open connections past their heads",
                   lambda: srv.open_connections == 3 and not srv._conns, 5)  # type: ignore[attr-defined]
        t0 = time.monotonic()
        assert exchange(port, b"GET /healthz HTTP/1.0\r\n\r\n") == 503
        assert time.monotonic() - t0 < 1.0
        gate.release.set()
        for t in clients:
            t.join(10)
        assert results == [200, 200, 200]
        assert srv.refused == {"full": 1}  # type: ignore[attr-defined]
        wait_until("every connection closed", lambda: srv.open_connections == 0, 5)  # type: ignore[attr-defined]


def test_clients_that_do_not_read_their_reply_hold_no_thread() -> None:
    """Three clients ask for an 8 MB /metrics and read nothing: with a single worker, a normal scrape
    is still answered at once (replies are sent by the I/O thread, without blocking), and the three
    are cut off by the reply's write deadline (1 s here)."""
    with server(Big(), workers=1, write_deadline_s=1.0) as (srv, port):
        body = raw_exchange(port, b"GET /metrics HTTP/1.0\r\n\r\n", timeout_s=30)      # rendered once
        assert reply_status(body) == 200 and len(body) > 8_000_000
        slow = []
        try:
            for _ in range(3):
                s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
                s.connect((LOOPBACK, port))
                s.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
                slow.append(s)
            time.sleep(0.3)
            t0 = time.monotonic()
            assert exchange(port, b"GET /healthz HTTP/1.0\r\n\r\n") == 200
            assert reply_status(raw_exchange(port, b"GET /metrics HTTP/1.0\r\n\r\n", timeout_s=30)) == 200
            took = time.monotonic() - t0
            assert took < 2.0, took
            wait_until("the slow readers cut off", lambda: srv.refused.get("write-deadline") == 3, 5)  # type: ignore[attr-defined]
            wait_until("every connection closed", lambda: srv.open_connections == 0, 5)  # type: ignore[attr-defined]
        finally:
            for s in slow:
                s.close()


def test_a_fixed_pool_answers_whatever_the_number_of_connections() -> None:
    """200 connections at once, half of them never finishing: the server's threads are its I/O thread
    and its pool before, during and after; its open connections never pass the cap."""
    def http_threads() -> int:
        return sum(t.name.startswith("gputop-http-") for t in threading.enumerate())

    with server(max_connections=16, workers=3, request_deadline_s=1.0) as (srv, port):
        assert http_threads() == 3
        most = 0
        socks = []
        try:
            for i in range(200):
                with contextlib.suppress(OSError):
                    s = socket.create_connection((LOOPBACK, port), timeout=5)
                    s.sendall(b"GET /healthz HTTP/1.0\r\n" + (b"\r\n" if i % 2 else b""))
                    socks.append(s)
                most = max(most, srv.open_connections)  # type: ignore[attr-defined]
                assert http_threads() == 3
            assert most <= 16
            answered = 0
            for s in socks:
                s.settimeout(5)
                with contextlib.suppress(OSError):
                    answered += reply_status(s.recv(4096)) in (200, 408, 503)
            assert answered == len(socks)
        finally:
            for s in socks:
                s.close()
        wait_until("every connection closed", lambda: srv.open_connections == 0, 5)  # type: ignore[attr-defined]
        assert http_threads() == 3
    assert http_threads() == 0                                                  # shutdown stops the pool


def test_the_exporter_raises_its_descriptor_limit_to_the_hard_one() -> None:
    from gputop.exporter.server import raise_fd_limit

    code = ("import resource; from gputop.exporter.server import raise_fd_limit; raise_fd_limit(); "
            "print(*resource.getrlimit(resource.RLIMIT_NOFILE))")

    def low() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (200, 300))

    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}, preexec_fn=low).stdout
    assert out.split() == ["300", "300"]
    assert raise_fd_limit() is None                                             # harmless here


def _from(src: str, port: int, request: bytes, rcvbuf: int | None = None) -> socket.socket:
    """A connection from loopback address ``src`` (all of 127/8 is this host's) that sends ``request``."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf is not None:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    s.bind((src, 0))
    s.settimeout(30)
    s.connect((LOOPBACK, port))
    s.sendall(request)
    return s


def _answer_from(src: str, port: int, request: bytes) -> int | None:
    with _from(src, port, request) as s:
        data = b""
        with contextlib.suppress(OSError):
            while chunk := s.recv(1 << 16):
                data += chunk
        return reply_status(data)


def test_clients_that_ask_and_never_read_lose_their_slots_to_scrapes() -> None:
    """Issue 40's review: 50 connections a second that send a complete request and never read held
    every slot (46 of 50 /metrics and 48 of 50 /healthz answered 503). Here, with the default limits
    and an 8 MB exposition, for 3 s: 50 such connections a second from one address, and one a round
    from each of 12 others; Prometheus (another address) scraping /metrics and /healthz meanwhile is
    answered 200 every time. The one address is held to its share (503 beyond), the others' replies
    that took nothing lose their slots."""
    with server(Big()) as (srv, port):
        assert reply_status(raw_exchange(port, b"GET /metrics HTTP/1.0\r\n\r\n", timeout_s=30)) == 200  # rendered once
        hogs: list[socket.socket] = []
        answers: list[int | None] = []
        ask = b"GET /metrics HTTP/1.0\r\n\r\n"
        try:
            end = time.monotonic() + 3.0
            while time.monotonic() < end:
                for src in ["127.0.0.1"] * 5 + [f"127.0.1.{i}" for i in range(1, 13)]:
                    with contextlib.suppress(OSError):
                        hogs.append(_from(src, port, ask, rcvbuf=4096))
                answers.append(_answer_from("127.0.0.2", port, b"GET /healthz HTTP/1.0\r\n\r\n"))
                answers.append(_answer_from("127.0.0.2", port, ask))
                time.sleep(0.1)
            assert len(answers) >= 10 and answers == [200] * len(answers), answers
            refused = srv.refused  # type: ignore[attr-defined]
            assert refused.get("per-address", 0) > 0 and refused.get("evicted", 0) > 0, refused
            assert srv.open_connections <= 64  # type: ignore[attr-defined]
        finally:
            for s in hogs:
                s.close()
