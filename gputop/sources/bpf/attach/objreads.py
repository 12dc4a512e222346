"""Reading other users' files and memory off the collector's path: worker threads, bounded waits.

An object is another user's file: reading it is bounded (elfread's sizes, counts and time budget),
but even a bounded read of a crafted object takes seconds, and a read of a file on a filesystem
its owner serves (FUSE) can block for good. The collector waits for each read only while its
refresh's budget lasts (WAIT_S); a read still running then finishes on a worker, and the collector
uses it at a later poll. Objects are read smallest first, those over LARGE_BYTES on a worker of
their own: a process's CUDA library (a few MB, read in milliseconds) never waits behind a user's
crafted gigabyte, and is still probed before the process's first call. A worker stuck in one read
past STUCK_S is left behind and replaced (at most MAX_ABANDONED times a pool), and that object is
taken as unreadable.
"""

from __future__ import annotations

import heapq
import os
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from contextlib import contextmanager
from typing import Generic, TypeVar

from gputop.sources.bpf.attach import symbols
from gputop.sources.bpf.common import elfread
from gputop.sources.bpf.program.startup import read_object

ObjectKey = tuple[int, int]
_T = TypeVar("_T")
#: seconds one scan may wait in all for object reads before leaving the rest to finish later;
#: the first scan, at start, before any refresh
WAIT_S = 0.25
START_WAIT_S = 5.0
#: reads queued or running at once; more objects wait for a later scan
MAX_QUEUED = 64
#: objects larger than this are read on a worker of their own; SMALL_WORKERS read the others
LARGE_BYTES = 64 << 20
SMALL_WORKERS = 2
#: a read still running this long is stuck (elfread stops a read that is merely slow much sooner)
STUCK_S = elfread.BUDGET_S + 10.0
#: stuck workers a pool leaves behind before it reads no more
MAX_ABANDONED = 8
#: seconds a finished read waits to be collected before it is dropped
UNCLAIMED_S = 60.0


class Pending(Exception):
    """The read is still running: use the object once it is done."""


class Stuck(Exception):
    """The read was left behind on a stuck worker."""


class ObjectReads:
    def __init__(self) -> None:
        self._small: SmallestFirst[symbols.ObjectSymbols | None] = SmallestFirst(SMALL_WORKERS, "gputop-elf")
        self._large: SmallestFirst[symbols.ObjectSymbols | None] = SmallestFirst(1, "gputop-elf-large")
        self._reads: dict[tuple[ObjectKey, bool], Future[symbols.ObjectSymbols | None]] = {}
        self._until: float | None = None
        self._ended: dict[tuple[ObjectKey, bool], float] = {}     # when each read ended (a worker's thread)

    @contextmanager
    def budget(self, seconds: float = WAIT_S) -> Iterator[None]:
        """Inside, the reads together wait at most ``seconds`` (a scan, a poll, a read of the
        counters); outside, each read is waited for until it ends or STUCK_S has passed."""
        if self._until is not None:         # within a budget already (a poll's scan): the same one
            yield
            return
        self._until = time.monotonic() + seconds
        try:
            yield
        finally:
            self._until = None

    def read(self, key: ObjectKey, fd: int, path: str, *, cuda_only: bool = True) -> symbols.ObjectSymbols | None:
        """The symbols of the object open as ``fd`` (the descriptor stays the caller's): only if it
        holds CUDA entry points (``cuda_only``), or all of them (to name a program's kernels);
        raises Pending when the read outlasts this budget's wait."""
        fut = self._reads.get((key, cuda_only))
        if fut is None:
            if sum(not f.done() for f in self._reads.values()) >= MAX_QUEUED:
                raise Pending(key)
            size = os.fstat(fd).st_size
            pool = self._large if size > LARGE_BYTES else self._small
            fut = pool.submit(size, _reader(os.dup(fd), path, cuda_only))
            fut.add_done_callback(lambda _f: self._ended.setdefault((key, cuda_only), time.monotonic()))
            self._reads[(key, cuda_only)] = fut
        # outside a budget: until it ends, or is stuck (nobody may be left to call check_stuck)
        wait = STUCK_S if self._until is None else max(0.0, self._until - time.monotonic())
        try:
            out = fut.result(timeout=wait)
        except FutureTimeout:
            raise Pending(key) from None
        except Exception:               # stuck, cancelled at close, or a read that failed: no symbols
            out = None
        del self._reads[(key, cuda_only)]
        self._ended.pop((key, cuda_only), None)
        return out

    def done(self) -> list[ObjectKey]:
        """Objects whose read for probing has finished and not been collected."""
        return [k for (k, cuda_only), f in self._reads.items() if cuda_only and f.done()]

    def discard(self, key: ObjectKey, *, cuda_only: bool = True) -> None:
        """Forget the read of ``key`` (its object went before it was used)."""
        self._reads.pop((key, cuda_only), None)
        self._ended.pop((key, cuda_only), None)

    def running(self) -> int:
        return len(self._reads)

    def check_stuck(self) -> None:
        """Replace stuck workers; drop reads nobody came back for (a process that went meanwhile)."""
        self._small.check_stuck()
        self._large.check_stuck()
        now = time.monotonic()
        for k, ended in list(self._ended.items()):
            if now - ended > UNCLAIMED_S:
                self._reads.pop(k, None)
                del self._ended[k]

    def close(self) -> None:
        self._small.close()
        self._large.close()


def _reader(fd: int, path: str, cuda_only: bool) -> Callable[[], symbols.ObjectSymbols | None]:
    def run() -> symbols.ObjectSymbols | None:
        try:
            return read_object(fd, path) if cuda_only else symbols.read_symbols(fd, path)
        finally:
            os.close(fd)
    return run


class _Worker:
    def __init__(self) -> None:
        self.since: float | None = None                 # when its current call started
        self.current: Future[object] | None = None
        self.abandoned = False


class SmallestFirst(Generic[_T]):
    """Worker threads running calls, the one of the smallest size queued first. A call that
    outlasts STUCK_S fails with Stuck and its worker is replaced (check_stuck)."""

    def __init__(self, workers: int, name: str) -> None:
        self._queue: list[tuple[int, int, Callable[[], _T], Future[_T]]] = []
        self._cv = threading.Condition()
        self._seq = 0
        self._closed = False
        self._name = name
        self._workers: list[_Worker] = []
        self.abandoned = 0
        for _ in range(workers):
            self._spawn()

    def _spawn(self) -> None:
        w = _Worker()
        self._workers.append(w)
        threading.Thread(target=self._run, args=(w,), name=f"{self._name}-{len(self._workers)}", daemon=True).start()

    def submit(self, size: int, call: Callable[[], _T]) -> Future[_T]:
        fut: Future[_T] = Future()
        with self._cv:
            if self._closed or self.abandoned >= MAX_ABANDONED:
                fut.set_exception(Stuck("no workers left"))
                return fut
            self._seq += 1
            heapq.heappush(self._queue, (size, self._seq, call, fut))
            self._cv.notify()
        return fut

    def _run(self, w: _Worker) -> None:
        while True:
            with self._cv:
                while not self._queue and not self._closed and not w.abandoned:
                    self._cv.wait()
                if self._closed or w.abandoned:
                    return
                _size, _seq, call, fut = heapq.heappop(self._queue)
                if not fut.set_running_or_notify_cancel():
                    continue
                w.since, w.current = time.monotonic(), fut     # type: ignore[assignment]
            try:
                result = call()
            except Exception as e:      # a call that fails is a result of its own
                _settle(fut, None, e)
            else:
                _settle(fut, result, None)
            with self._cv:
                w.since, w.current = None, None
                if w.abandoned:
                    return

    def check_stuck(self) -> None:
        """Leave behind the workers stuck in one call past STUCK_S (their calls fail with Stuck)."""
        now = time.monotonic()
        with self._cv:
            for w in list(self._workers):
                if w.since is not None and now - w.since >= STUCK_S:
                    self._abandon(w)

    def abandon(self, fut: Future[_T]) -> None:
        """Leave behind the worker running ``fut`` now (or drop ``fut`` if it has not started)."""
        with self._cv:
            for w in list(self._workers):
                if w.current is fut:
                    self._abandon(w)
                    return
        fut.cancel()

    def _abandon(self, w: _Worker) -> None:
        w.abandoned = True
        self._workers.remove(w)
        self.abandoned += 1
        if w.current is not None:
            _settle(w.current, None, Stuck("left behind on a stuck worker"))
        if self.abandoned < MAX_ABANDONED:
            self._spawn()

    def close(self) -> None:
        with self._cv:
            self._closed = True
            queued, self._queue = self._queue, []
            self._cv.notify_all()
        for _size, _seq, _call, fut in queued:
            fut.cancel()


def _settle(fut: Future[_T], result: _T | None, error: BaseException | None) -> None:
    """Complete ``fut`` unless it already was (a stuck call settled by check_stuck)."""
    try:
        if error is not None:
            fut.set_exception(error)
        else:
            fut.set_result(result)      # type: ignore[arg-type]
    except Exception:                   # InvalidStateError: settled already
        pass


class BoundedCalls:
    """Calls that may block for good (a read of another process's memory that a FUSE file backs),
    run on one worker and waited for at most ``timeout_s``; a call that outlasts it leaves its
    worker behind (at most MAX_ABANDONED; after that, no more calls are made) and returns None."""

    def __init__(self, name: str, timeout_s: float) -> None:
        self._pool: SmallestFirst[object] = SmallestFirst(1, name)
        self._timeout_s = timeout_s

    def call(self, fn: Callable[[], _T]) -> _T | None:
        fut = self._pool.submit(0, fn)
        try:
            return fut.result(timeout=self._timeout_s)      # type: ignore[return-value]
        except FutureTimeout:
            self._pool.abandon(fut)
            return None
        except Exception:
            return None

    def close(self) -> None:
        self._pool.close()
