"""Sending a signal to processes the dashboard lists (``k``): each PID pinned by a pidfd, then
checked to still run the process listed (its command, and its start time when known) before the
signal goes, so a PID the kernel gave to another process meanwhile is never signalled."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Sequence

#: (pid, comm, start_time) of a process to signal, as listed
Target = tuple[int, "str | None", "float | None"]


def send_checked(targets: Sequence[Target], signum: int, say: Callable[..., None]) -> None:
    """Send ``signum`` to each target whose PID still runs it; each outcome said through ``say``
    (``say(text)`` or ``say(text, "error")``). Blocking: run it off the UI thread."""
    name = signal.Signals(signum).name
    for pid, comm, start_time in targets:
        try:
            # the pidfd pins the process: what is checked below is what the signal reaches
            fd = os.pidfd_open(pid)
        except OSError as e:
            say(f"{name} to {pid} failed: {e.strerror or e}", "error")
            continue
        try:
            check_identity(pid, comm, start_time)
            signal.pidfd_send_signal(fd, signum)
        except (OSError, LookupError) as e:
            msg = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
            say(f"{name} to {pid} failed: {msg}", "error")
        else:
            say(f"sent {name} to {pid} ({comm})")
        finally:
            os.close(fd)


def check_identity(pid: int, comm: str | None, start_time: float | None) -> None:
    """Raise LookupError unless PID ``pid`` still runs command ``comm`` (and, when known, the process
    started at ``start_time``, seconds since the epoch as psutil gives it): a PID may have been reused."""
    import psutil

    with open(f"/proc/{pid}/comm", "rb") as f:   # comm: up to 15 bytes, any bytes
        now = f.read().removesuffix(b"\n")     # the kernel's newline; the name may hold one
    if comm is None:
        raise LookupError(f"the command of PID {pid} is unknown, so a reused PID cannot be ruled out")
    if now != comm.encode("utf-8", "surrogateescape")[:15]:
        shown = now.decode("utf-8", "surrogateescape")
        raise LookupError(f"PID {pid} now runs '{shown}', not '{comm}' (PID reused)")
    if start_time is not None:
        try:
            started = psutil.Process(pid).create_time()
        except psutil.Error as e:
            raise LookupError(f"PID {pid}: {e}") from None
        if abs(started - start_time) > 0.02:  # the kernel counts start times in clock ticks (10 ms)
            raise LookupError(f"PID {pid} now runs another '{comm}', started {started - start_time:+.2f} s later "
                              f"(PID reused)")
