"""Reading mapped objects' symbols off the collector's path: one worker thread, and a bounded wait.

An object is another user's file: reading it is bounded (elfread's sizes, counts and time budget),
but even a bounded read of a crafted object takes seconds. The collector waits for each read only
while its refresh's budget lasts (WAIT_S); a read still running then finishes on the worker, and
the collector attaches the object at a later poll. A process's CUDA library (a few MB) is read in
milliseconds, well inside the wait: it is still probed before the process's first call.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from contextlib import contextmanager

from gputop.sources import symbols
from gputop.sources.startup import read_object

ObjectKey = tuple[int, int]
#: seconds one scan may wait in all for object reads before leaving the rest to finish later
WAIT_S = 0.25
#: reads queued or running at once; more objects wait for a later scan
MAX_QUEUED = 64


class Pending(Exception):
    """The read is still running: attach the object once it is done."""


class ObjectReads:
    def __init__(self) -> None:
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="gputop-elf")
        self._reads: dict[ObjectKey, Future[symbols.ObjectSymbols | None]] = {}
        self._until: float | None = None

    @contextmanager
    def budget(self) -> Iterator[None]:
        """Inside, the reads together wait at most WAIT_S (a scan, a poll); outside, each read is
        waited for until it ends (elfread's own budget bounds it)."""
        if self._until is not None:         # within a budget already (a poll's scan): the same one
            yield
            return
        self._until = time.monotonic() + WAIT_S
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
            fut = self._pool.submit(_read_dup, os.dup(fd), path)
            self._reads[key] = fut
        wait = None if self._until is None else max(0.0, self._until - time.monotonic())
        try:
            out = fut.result(timeout=wait)
        except FutureTimeout:
            raise Pending(key) from None
        del self._reads[key]
        return out

    def done(self) -> list[ObjectKey]:
        """Objects whose read has finished and not been collected."""
        return [k for k, f in self._reads.items() if f.done()]

    def running(self) -> int:
        return len(self._reads)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


def _read_dup(fd: int, path: str) -> symbols.ObjectSymbols | None:
    try:
        return read_object(fd, path)
    finally:
        os.close(fd)
