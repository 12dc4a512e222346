"""The fleet client reads an answer within its timeout in all and up to MAX_ANSWER_BYTES: a server
that sends a byte now and then, or without end, cannot hold the fleet's reader or fill its memory
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

from gputop.feeds import prometheus
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


def test_an_answer_dripped_a_byte_at_a_time_ends_at_the_timeout(serve: Callable[..., str]) -> None:
    """Each byte comes well within the socket's timeout, so only a deadline for the whole ends it."""
    def answer(h: BaseHTTPRequestHandler) -> None:
        _head(h, length=len(ANSWER))
        for byte in ANSWER:
            h.wfile.write(bytes([byte]))
            h.wfile.flush()
            time.sleep(0.2)

    t0 = time.monotonic()
    with pytest.raises(FleetError) as e:
        PromClient(serve(answer), 1.0).query("up", time.time())
    took_s = time.monotonic() - t0
    assert (e.value.kind, str(e.value).split(" at ")[0]) == ("slow", "Prometheus")
    assert str(e.value).endswith("did not answer within 1 s")
    assert 1.0 <= took_s < 2.0          # the deadline, checked after each receive (0.2 s apart)


def test_an_answer_without_end_is_not_read_past_the_bound(serve: Callable[..., str],
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(prometheus, "MAX_ANSWER_BYTES", 1 << 20)
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
