"""Reading mapped objects' symbols off the collector's path: worker threads, and a bounded wait.

An object is another user's file: reading it is bounded (elfread's sizes, counts and time budget),
but even a bounded read of a crafted object takes seconds. The collector waits for each read only
while its refresh's budget lasts (WAIT_S); a read still running then finishes on a worker, and
the collector attaches the object at a later poll. Objects are read smallest first, those over
LARGE_BYTES on a worker of their own: a process's CUDA library (a few MB, read in milliseconds)
never waits behind a user's crafted gigabyte, and is still probed before the process's first call.
"""

from __future__ import annotations

import heapq
import os
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from contextlib import contextmanager

from gputop.sources import symbols
from gputop.sources.startup import read_object

ObjectKey = tuple[int, int]
#: seconds one scan may wait in all for object reads before leaving the rest to finish later;
#: the first scan, at start, before any refresh
WAIT_S = 0.25
START_WAIT_S = 5.0
#: reads queued or running at once; more objects wait for a later scan
MAX_QUEUED = 64
#: objects larger than this are read on a worker of their own; SMALL_WORKERS read the others
LARGE_BYTES = 64 << 20
SMALL_WORKERS = 2


class Pending(Exception):
    """The read is still running: attach the object once it is done."""


class ObjectReads:
    def __init__(self) -> None:
        self._small = SmallestFirst(SMALL_WORKERS, "gputop-elf")
        self._large = SmallestFirst(1, "gputop-elf-large")
        self._reads: dict[ObjectKey, Future[symbols.ObjectSymbols | None]] = {}
        self._until: float | None = None

    @contextmanager
    def budget(self, seconds: float = WAIT_S) -> Iterator[None]:
        """Inside, the reads together wait at most ``seconds`` (a scan, a poll); outside, each read
        is waited for until it ends (elfread's own budget bounds it)."""
        if self._until is not None:         # within a budget already (a poll's scan): the same one
            yield
            return
        self._until = time.monotonic() + seconds
        try:
            yield
        finally:
            self._until = None

    def read(self, key: ObjectKey, fd: int, path: str) -> symbols.ObjectSymbols | None:
        """The symbols of the object open as ``fd`` (the descriptor stays the caller's); raises
        Pending when the read outlasts this scan's wait."""
        fut = self._reads.get(key)
        if fut is None:
            if len(self._reads) >= MAX_QUEUED:
                raise Pending(key)
            size = os.fstat(fd).st_size
            fut = (self._large if size > LARGE_BYTES else self._small).submit(size, os.dup(fd), path)
            self._reads[key] = fut
        wait = None if self._until is None else max(0.0, self._until - time.monotonic())
        try:
            out = fut.result(timeout=wait)
        except FutureTimeout:
            raise Pending(key) from None
        except Exception:               # cancelled at close, or a read that failed: no symbols
            out = None
        del self._reads[key]
        return out

    def done(self) -> list[ObjectKey]:
        """Objects whose read has finished and not been collected."""
        return [k for k, f in self._reads.items() if f.done()]

    def running(self) -> int:
        return len(self._reads)

    def close(self) -> None:
        self._small.close()
        self._large.close()


class SmallestFirst:
    """Worker threads reading objects (each given as a descriptor of its own, closed once read),
    the smallest queued first."""

    def __init__(self, workers: int, name: str) -> None:
        self._queue: list[tuple[int, int, int, str, Future[symbols.ObjectSymbols | None]]] = []
        self._cv = threading.Condition()
        self._seq = 0
        self._closed = False
        for i in range(workers):
            threading.Thread(target=self._run, name=f"{name}-{i}", daemon=True).start()

    def submit(self, size: int, fd: int, path: str) -> Future[symbols.ObjectSymbols | None]:
        fut: Future[symbols.ObjectSymbols | None] = Future()
        with self._cv:
            self._seq += 1
            heapq.heappush(self._queue, (size, self._seq, fd, path, fut))
            self._cv.notify()
        return fut

    def _run(self) -> None:
        while True:
            with self._cv:
                while not self._queue and not self._closed:
                    self._cv.wait()
                if self._closed:
                    return
                _size, _seq, fd, path, fut = heapq.heappop(self._queue)
            try:
                if fut.set_running_or_notify_cancel():
                    fut.set_result(read_object(fd, path))
            except Exception as e:      # a read that fails is a read without symbols
                fut.set_exception(e)
            finally:
                os.close(fd)

    def close(self) -> None:
        with self._cv:
            self._closed = True
            queued, self._queue = self._queue, []
            self._cv.notify_all()
        for _size, _seq, fd, _path, fut in queued:
            os.close(fd)
            fut.cancel()
