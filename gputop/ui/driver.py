"""The terminal driver: Textual's Linux driver, with an input thread that sleeps until there is input.

Textual's input thread wakes ten times a second to see whether it should stop and whether a lone
Escape has waited long enough to be a key (``select(0.1)``); idle, that is about 1.2 ms of CPU a
second here, a fifth of what htop takes to refresh (bench/ui_cpu.py). This one waits on the terminal
and on a pipe that the driver's exit event writes to when it is set, with a timeout only while the
key parser waits out an escape sequence: a key, a paste and the stop (``disable_input``: quit,
suspend) are seen at once, and an idle dashboard's input thread costs nothing.
"""

from __future__ import annotations

import contextlib
import os
import selectors
from codecs import getincrementaldecoder
from threading import Event

from textual._time import get_time
from textual._xterm_parser import XTermParser
from textual.drivers.linux_driver import LinuxDriver


class _WakingEvent(Event):
    """An event that also makes a byte readable on ``fd`` when set (the input thread's select sees it)."""

    def __init__(self, fd: int) -> None:
        super().__init__()
        self._fd = fd

    def set(self) -> None:
        super().set()
        with contextlib.suppress(OSError):     # the pipe is full (the thread wakes anyway) or closed
            os.write(self._fd, b"x")


class QuietLinuxDriver(LinuxDriver):
    """``LinuxDriver`` whose input thread blocks until input, an escape timeout or the stop."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self.exit_event = _WakingEvent(self._wake_w)

    def _drain_wake(self) -> None:
        try:
            while os.read(self._wake_r, 512):
                pass
        except OSError:     # empty (non-blocking) or closed
            pass

    def run_input_thread(self) -> None:
        """Textual's loop (``LinuxDriver.run_input_thread``) with a select that waits as long as it may."""
        selector = selectors.SelectSelector()
        fileno = self.fileno
        selector.register(fileno, selectors.EVENT_READ)
        selector.register(self._wake_r, selectors.EVENT_READ)
        parser = XTermParser(self._debug)
        feed = parser.feed
        tick = parser.tick
        decode = getincrementaldecoder("utf-8")().decode
        read = os.read

        def timeout() -> float | None:
            """Until the parser's pending escape becomes a key (None: nothing pending)."""
            due = parser._timeout_time
            return None if due is None else max(0.0, due - get_time())

        def process(events: list[tuple[selectors.SelectorKey, int]], final: bool = False) -> None:
            for key, mask in events:
                if key.fd == self._wake_r:
                    self._drain_wake()
                    continue
                if mask & selectors.EVENT_READ:
                    data = decode(read(fileno, 1024 * 4), final=final)
                    if not data:
                        break       # stdin is piped and ended
                    for event in feed(data):
                        self.process_message(event)
            for event in tick():
                self.process_message(event)

        try:
            if self.exit_event.is_set():
                return
            self._drain_wake()      # a stop before this start (suspend, then resume)
            while not self.exit_event.is_set():
                process(selector.select(timeout()))
            process([], final=True)     # an escape still pending is delivered
        finally:
            selector.close()
            try:
                for _ in feed(""):
                    pass
            except Exception:     # the parser's EOF or a parse error at the end: nothing to deliver
                pass
