"""Batch mode's signal handling: its main thread runs bcc's ring-buffer callbacks (ctypes), and an
exception raised inside a ctypes callback is printed and dropped, so a stop must not be an exception."""

from __future__ import annotations

import ctypes
import os
import signal
from collections.abc import Iterator

import pytest

from gputop.modes.common import stop_on_signals

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@pytest.fixture(autouse=True)
def restore_handlers() -> Iterator[None]:
    saved = {s: signal.getsignal(s) for s in SIGNALS}
    yield
    for s, h in saved.items():
        signal.signal(s, h)


def call_through_c(fn: object) -> None:
    """Run ``fn`` as a callback from C code (libc's qsort calls its comparator), as bcc runs its
    ring-buffer callbacks."""
    libc = ctypes.CDLL(None)
    cmp = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)

    def compare(_a: int, _b: int) -> int:
        fn()  # type: ignore[operator]
        return 0

    arr = (ctypes.c_int * 2)(2, 1)
    libc.qsort(arr, 2, ctypes.sizeof(ctypes.c_int), cmp(compare))


@pytest.mark.parametrize("sig", SIGNALS, ids=lambda s: s.name)
def test_a_signal_inside_a_callback_stops_batch_mode(sig: signal.Signals) -> None:
    requested: list[int] = []
    stop_on_signals(lambda: requested.append(sig))
    call_through_c(lambda: os.kill(os.getpid(), sig))   # the handler runs inside the callback
    assert requested == [sig]
    with pytest.raises(KeyboardInterrupt):              # a second signal: stop now
        os.kill(os.getpid(), sig)


def test_without_a_stop_request_sigterm_raises_as_sigint_does() -> None:
    """The dashboard (Textual on the main thread, no ctypes callbacks there): SIGTERM and SIGHUP
    raise KeyboardInterrupt, SIGINT keeps Python's handler."""
    before = signal.getsignal(signal.SIGINT)
    stop_on_signals()
    assert signal.getsignal(signal.SIGINT) is before
    for sig in (signal.SIGTERM, signal.SIGHUP):
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), sig)
