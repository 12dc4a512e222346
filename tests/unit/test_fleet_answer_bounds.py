"""The fleet client reads an answer within its timeout in all and up to MAX_ANSWER_BYTES: a server
that sends a byte now and then (in its body, status line or headers), or without end, cannot hold the
fleet's reader or fill its memory, and one that does not answer in HTTP is reported, never a traceback
(docs/fleet.md, "When Prometheus fails"). The servers here are real HTTP servers on a local port that
answer as such a server would; a real Prometheus answers in tests/unit/test_fleet*.py."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from gputop.feeds import fleet_client
from gputop.feeds.prometheus import FleetError, PromClient

ANSWER = json.dumps({"status": "success", "data": {"resultType": "vector", "result": [
    {"metric": {"__name__": "up", "instance": "node-a:9464"}, "value": [1700000000, "1"]}]}}).encode()


@pytest.fixture
def serve() -> Iterator[Callable[[Callable[[BaseHTTPRequestHandler], None]], str]]:
    """serve(answer) -> the URL of a server whose every POST is answered by ``answer(handler)``."""
    servers: list[ThreadingHTTPServer] = []

    def start(answer: Callable[[BaseHTTPRequestHandler], None]) -> str:
        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length", "0")))
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):    # the client hung up
                    answer(self)

            def log_message(self, *args: object) -> None:
                pass

        srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        srv.daemon_threads = True
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        servers.append(srv)
        return f"http://127.0.0.1:{srv.server_address[1]}"

    yield start
    for srv in servers:
        srv.shutdown()
        srv.server_close()


def _head(h: BaseHTTPRequestHandler, code: int = 200, length: int | None = None) -> None:
    h.send_response(code)
    h.send_header("Content-Type", "application/json")
    if length is not None:
        h.send_header("Content-Length", str(length))
    h.end_headers()
    h.wfile.flush()


def test_a_whole_answer_is_read(serve: Callable[..., str]) -> None:
    def answer(h: BaseHTTPRequestHandler) -> None:
        _head(h, length=len(ANSWER))
        h.wfile.write(ANSWER)

    result = PromClient(serve(answer), 5.0).query("up", time.time())
    assert result == json.loads(ANSWER)["data"]["result"]
    deadline = time.monotonic() + 5.0       # the request's watchdog is gone with it
    while any(isinstance(t, threading.Timer) for t in threading.enumerate()) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not [t for t in threading.enumerate() if isinstance(t, threading.Timer)]


def _drip(h: BaseHTTPRequestHandler, data: bytes, every_s: float = 0.2) -> None:
    for byte in data:
        h.wfile.write(bytes([byte]))
        h.wfile.flush()
        time.sleep(every_s)


@pytest.mark.parametrize("where", ["body", "status line", "headers"])
def test_an_answer_dripped_a_byte_at_a_time_ends_at_the_timeout(serve: Callable[..., str], where: str) -> None:
    """Each byte comes well within the socket's timeout, so only a deadline for the whole ends it: the
    body's reader checks it after each receive; the status line and headers, which http.client reads
    itself, end when the request's watchdog shuts the socket down."""
    def answer(h: BaseHTTPRequestHandler) -> None:
        head = b"HTTP/1.1 200 OK\r\n"
        if where == "body":
            _head(h, length=len(ANSWER))
            _drip(h, ANSWER)
        elif where == "status line":
            _drip(h, head + b"Content-Type: application/json\r\n\r\n")
        else:
            h.wfile.write(head)
            _drip(h, b"Content-Type: application/json\r\nX-Slow: " + b"x" * 40 + b"\r\n\r\n")

    t0 = time.monotonic()
    with pytest.raises(FleetError) as e:
        PromClient(serve(answer), 1.0).query("up", time.time())
    took_s = time.monotonic() - t0
    assert (e.value.kind, str(e.value).split(" at ")[0]) == ("slow", "Prometheus")
    assert str(e.value).endswith("did not answer within 1 s")
    assert 1.0 <= took_s < 2.0          # the deadline, not a byte's 0.2 s nor the many seconds the whole takes


@pytest.mark.parametrize(("sent", "what"), [(b"SSH-2.0-OpenSSH_9.2\r\n", "BadStatusLine"),
                                            (b"HTTP/1.1 200 OK\r\n" + b"X: " + b"y" * 70000 + b"\r\n\r\n",
                                             "LineTooLong")], ids=["ssh", "header over 64 KiB"])
def test_an_answer_that_is_not_http_is_reported(serve: Callable[..., str], sent: bytes, what: str) -> None:
    def answer(h: BaseHTTPRequestHandler) -> None:
        h.wfile.write(sent)
        h.wfile.flush()

    url = serve(answer)
    with pytest.raises(FleetError) as e:
        PromClient(url, 5.0).query("up", time.time())
    assert e.value.kind == "unreachable"
    assert str(e.value) == f"Prometheus at {url} did not answer in HTTP: {what}"
    assert e.value.hint == "give the URL of Prometheus itself (http://HOST:9090)"


def test_an_error_answer_whose_json_is_not_an_object_is_reported(serve: Callable[..., str]) -> None:
    body = b'["not", "an", "object"]'

    def answer(h: BaseHTTPRequestHandler) -> None:
        _head(h, code=400, length=len(body))
        h.wfile.write(body)

    with pytest.raises(FleetError) as e:
        PromClient(serve(answer), 5.0).query("up", time.time())
    assert e.value.kind == "refused"
    assert str(e.value).endswith("refused the query 'up': " + body.decode())


def test_an_answer_without_end_is_not_read_past_the_bound(serve: Callable[..., str],
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fleet_client, "MAX_ANSWER_BYTES", 1 << 20)
    sent: list[int] = []

    def answer(h: BaseHTTPRequestHandler) -> None:
        _head(h)                            # no length: the body ends when the connection does
        block = b"[" * (1 << 16)
        for _ in range(1024):               # 64 MiB, if the client read it all
            h.wfile.write(block)
            sent.append(len(block))

    url = serve(answer)
    with pytest.raises(FleetError) as e:
        PromClient(url, 30.0).query("up", time.time())
    assert e.value.kind == "unreachable"
    assert str(e.value) == f"Prometheus at {url} answered more than 1 MiB to one query: not read"
    assert e.value.hint == "give the URL of Prometheus itself (http://HOST:9090), and narrow --match / --node"
    assert sum(sent) < 64 << 20


def test_an_error_answer_is_read_up_to_its_own_bound(serve: Callable[..., str]) -> None:
    """A 400 whose body never ends: the refusal is reported, its text cut to 200 characters."""
    def answer(h: BaseHTTPRequestHandler) -> None:
        _head(h, code=400)
        for _ in range(1024):
            h.wfile.write(b"x" * (1 << 16))

    with pytest.raises(FleetError) as e:
        PromClient(serve(answer), 30.0).query("up", time.time())
    assert e.value.kind == "refused"
    assert str(e.value).endswith("refused the query 'up': " + "x" * 200)
