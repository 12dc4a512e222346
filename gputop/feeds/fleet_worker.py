"""The fleet view's reader in a child process: Prometheus's answers are read and parsed there, so the
dashboard's interpreter lock is never held by a parse.

At 64,000 processes a refresh's answers are tens of megabytes of JSON. ``json.loads`` holds the
interpreter lock for a whole document, so in the dashboard's process keys waited seconds while a
refresh was read. Here ``python -m gputop.feeds.fleet_worker`` runs ``gputop.feeds.prometheus.FleetReader`` (HTTP,
JSON, building the snapshot) and hands back each refresh over its stdout as pickled frames: a
head (the snapshot without its processes, the watched processes' series, the query count), then
the processes in chunks of ``CHUNK``. The feed's thread unpickles one chunk at a time and lets the
dashboard's thread in between, so a key waits at most one chunk's unpickling for the interpreter.

Frames are an 8-byte little-endian length and a pickle. Pickles are read only from this child,
which the feed starts itself from gputop's own code. The child ends when its stdin closes (the
feed stops, or the dashboard's process dies) or when it is killed (``WorkerReader.close``).
"""

from __future__ import annotations

import contextlib
import gc
import os
import pickle
import struct
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import IO, Any

from gputop.feeds.fleet_topk import Scope, View
from gputop.feeds.prometheus import FleetConfig, FleetError, FleetReader, Series, Watched
from gputop.model import Snapshot

#: processes per frame: the feed's thread unpickles one frame, then yields the interpreter
CHUNK = 500
_LENGTH = struct.Struct("<Q")
#: the child's niceness above the dashboard's: on a busy host, keys are handled before answers are parsed
NICE = 10


def write_frame(out: IO[bytes], obj: object) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    out.write(_LENGTH.pack(len(data)))
    out.write(data)


def read_frame(inp: IO[bytes]) -> bytes | None:
    """One frame's pickle, or None at the end of the stream."""
    head = inp.read(_LENGTH.size)
    if len(head) < _LENGTH.size:
        return None
    (n,) = _LENGTH.unpack(head)
    data = inp.read(n)
    return data if len(data) == n else None


def serve(inp: IO[bytes], out: IO[bytes]) -> None:
    """The child's loop: the config, then a request ``(at, watched, interval_s, view)`` per refresh."""
    first = read_frame(inp)
    if first is None:
        return
    config: FleetConfig = pickle.loads(first)
    reader = FleetReader(config)
    try:
        while (request := read_frame(inp)) is not None:
            at, watched, interval_s, view = pickle.loads(request)
            # a refresh allocates millions of objects, none in a cycle: without the cyclic collector
            # walking them again and again, parsing takes about half the time
            gc.disable()
            try:
                snap, series = reader.read(at, watched, interval_s, view)
            except FleetError as e:
                write_frame(out, ("error", reader.queries, e.kind, e.message, e.hint))
                out.flush()
                continue
            finally:
                gc.enable()
            procs = snap.processes
            chunks = [procs[i:i + CHUNK] for i in range(0, len(procs), CHUNK)]
            write_frame(out, ("ok", reader.queries, replace(snap, processes=()), series, len(chunks), reader.scope))
            for chunk in chunks:
                write_frame(out, chunk)
            out.flush()
            del snap, procs, chunks
    finally:
        reader.close()


def main() -> int:
    inp, out = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr         # the pipe carries frames only
    with contextlib.suppress(OSError):
        os.nice(NICE)               # the dashboard's keys before this process's parsing
    with contextlib.suppress(BrokenPipeError, KeyboardInterrupt):     # the feed went away
        serve(inp, out)
    return 0


class WorkerReader:
    """``gputop.feeds.fleet.Reader`` through the child: started at the first refresh (and again if it died)."""

    def __init__(self, config: FleetConfig) -> None:
        self.config = config
        self._proc: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()
        self._closed = False
        self._queries_before = 0        # queries of children that ended
        self._queries = 0
        #: the child's process id (the benchmark reads its memory)
        self.pid: int | None = None
        #: the last refresh's top-K reading (``FleetReader.scope``); None: every row
        self.scope: Scope | None = None

    @property
    def queries(self) -> int:
        return self._queries_before + self._queries

    def _start(self) -> subprocess.Popen[bytes]:
        import gputop

        root = str(Path(gputop.__file__).resolve().parents[1])
        path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p)
        proc = subprocess.Popen([sys.executable, "-m", "gputop.feeds.fleet_worker"], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                env={**os.environ, "PYTHONPATH": path})
        assert proc.stdin is not None
        write_frame(proc.stdin, self.config)
        proc.stdin.flush()
        self._queries_before += self._queries
        self._queries = 0
        self.pid = proc.pid
        return proc

    def read(self, at: float, watched: Watched, interval_s: float,
             view: View | None = None) -> tuple[Snapshot, Series]:
        with self._lock:
            if self._closed:
                raise FleetError("stopped", "the fleet view is stopping", "")
            if self._proc is None or self._proc.poll() is not None:
                self._proc = self._start()
            proc = self._proc
        assert proc.stdin is not None and proc.stdout is not None
        try:
            write_frame(proc.stdin, (at, watched, interval_s, view))
            proc.stdin.flush()
            head = self._next(proc)
            if head[0] == "error":
                _, self._queries, kind, message, hint = head
                raise FleetError(kind, message, hint)
            _, self._queries, snap, series, chunks, self.scope = head
            processes: list[Any] = []
            # the cyclic collector walks every live object when it runs a full collection, holding the
            # interpreter: a 64,000-process snapshot (some 600,000 objects) made it run several times
            # while read here, 0.1 to 1.6 s each; once, after the whole snapshot, is enough
            was_enabled = gc.isenabled()
            gc.disable()
            try:
                for _ in range(chunks):
                    processes.extend(self._next(proc))
                    time.sleep(0)       # let the dashboard's thread take the interpreter between chunks
            finally:
                if was_enabled:
                    gc.enable()
        except (OSError, EOFError, pickle.UnpicklingError):
            raise self._died(proc) from None
        snap = replace(snap, processes=tuple(processes))
        if self.scope is not None:
            snap.__dict__["summary"] = self.scope.summary   # the fleet's totals (FleetReader.read)
        return snap, series

    def _next(self, proc: subprocess.Popen[bytes]) -> Any:
        assert proc.stdout is not None
        data = read_frame(proc.stdout)
        if data is None:
            raise EOFError
        return pickle.loads(data)

    def _died(self, proc: subprocess.Popen[bytes]) -> FleetError:
        if self._closed:
            return FleetError("stopped", "the fleet view is stopping", "")
        try:
            code = proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            code = proc.wait()
        return FleetError("reader", f"the fleet view's reader process ended (exit status {code})",
                          "run the same command with -b -n 1 to see the error")

    def close(self) -> None:
        """End the child now (a refresh being read ends with it)."""
        with self._lock:
            self._closed = True
            proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.stdin is not None:
            with contextlib.suppress(OSError):
                proc.stdin.close()
        try:
            proc.wait(timeout=0.5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


if __name__ == "__main__":
    raise SystemExit(main())
