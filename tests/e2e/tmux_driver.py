"""Drive a program in a detached tmux session: start, send keys, read the screen.

Used by the end-to-end tests and by bench/ui_cpu.py. Each session gets its own tmux server
socket (``-L``), so nothing touches the user's tmux.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path


class TmuxError(RuntimeError):
    pass


def have_tmux() -> bool:
    return shutil.which("tmux") is not None


class TmuxSession:
    """``with TmuxSession(["python", "-m", "gputop.ui", ...]) as t: t.wait_for("gputop")``."""

    def __init__(
        self,
        argv: Sequence[str],
        *,
        width: int = 160,
        height: int = 45,
        env: dict[str, str] | None = None,
        cwd: Path | str | None = None,
    ) -> None:
        self.argv = list(argv)
        self.width = width
        self.height = height
        self.env = env or {}
        self.cwd = str(cwd) if cwd else None
        self.socket = f"gputop-test-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.name = "s"
        self.started_at = 0.0
        self._dir: Path | None = None

    def _tmux(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["tmux", "-L", self.socket, *args], capture_output=True, text=True, check=check)

    def start(self) -> TmuxSession:
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in self.env.items())
        self._dir = Path(tempfile.mkdtemp(prefix="gputop-tmux-"))
        # the server reads remain-on-exit from its config before the program starts, so even a
        # program that exits at once leaves its last screen to read
        (self._dir / "tmux.conf").write_text("set-option -g remain-on-exit on\nset-option -g default-shell /bin/sh\n")
        # the shell records the exit status: tmux 3.3 sometimes marks the pane dead without
        # reaping the program, and then has no status to report
        status = shlex.quote(str(self._dir / "status"))
        # COLUMNS/LINES inherited from a test runner would override the pane's real size
        command = (f"env -u COLUMNS -u LINES {env} TERM=xterm-256color {shlex.join(self.argv)}; "
                   f"echo $? > {status}.tmp && mv {status}.tmp {status}")
        args = ["new-session", "-d", "-s", self.name, "-x", str(self.width), "-y", str(self.height)]
        if self.cwd:
            args += ["-c", self.cwd]
        self.started_at = time.monotonic()
        self._tmux("-f", str(self._dir / "tmux.conf"), *args, command)
        return self

    @property
    def pid(self) -> int:
        out = self._tmux("list-panes", "-t", self.name, "-F", "#{pane_pid}").stdout.split()
        if not out:
            raise TmuxError("no pane")
        return int(out[0])

    def alive(self) -> bool:
        r = self._tmux("list-panes", "-t", self.name, "-F", "#{pane_dead}", check=False)
        return r.returncode == 0 and r.stdout.strip() == "0"

    def send_keys(self, *keys: str, literal: bool = False) -> None:
        """tmux key names ("Enter", "Escape", "C-c", "Space") or, with ``literal``, text."""
        args = ["send-keys", "-t", self.name]
        if literal:
            args.append("-l")
        self._tmux(*args, *keys)

    def resize(self, width: int, height: int) -> None:
        """Resize the window (the program gets SIGWINCH, as when a user drags a terminal)."""
        self._tmux("resize-window", "-t", self.name, "-x", str(width), "-y", str(height))
        self.width, self.height = width, height

    def capture(self) -> str:
        return self._tmux("capture-pane", "-p", "-t", self.name).stdout

    def lines(self) -> list[str]:
        return self.capture().splitlines()

    def wait_for(
        self, predicate: str | Callable[[str], bool], timeout: float = 10.0, poll: float = 0.02
    ) -> str:
        """Wait until the screen contains ``predicate`` (or it returns True); return the screen."""
        check = (lambda s: predicate in s) if isinstance(predicate, str) else predicate
        deadline = time.monotonic() + timeout
        screen = ""
        while time.monotonic() < deadline:
            dead = not self.alive()  # read before the screen, so a last frame is never missed
            screen = self.capture()
            if check(screen):
                return screen
            if dead:
                raise TmuxError(f"the program exited before {predicate!r}; screen was:\n{screen}")
            time.sleep(poll)
        raise TmuxError(f"timed out waiting for {predicate!r}; screen was:\n{screen}")

    def wait_exit(self, timeout: float = 10.0, poll: float = 0.02) -> int:
        """Wait until the program has exited; return its exit status."""
        deadline = time.monotonic() + timeout
        status = self._dir / "status" if self._dir else None
        while time.monotonic() < deadline:
            if status is not None and status.exists():
                return int(status.read_text())
            time.sleep(poll)
        raise TmuxError(f"the program did not exit within {timeout} s; screen was:\n{self.capture()}")

    def kill(self) -> None:
        self._tmux("kill-server", check=False)
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None
        socket = Path(os.environ.get("TMUX_TMPDIR", "/tmp")) / f"tmux-{os.getuid()}" / self.socket
        socket.unlink(missing_ok=True)

    def __enter__(self) -> TmuxSession:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.kill()


def process_tree(pid: int) -> list[int]:
    """``pid`` and its descendants (from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_bytes()  # bytes: a name may be any bytes but NUL and "/"
        except OSError:
            continue
        ppid = int(stat.rsplit(b")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, []))
    return out


def cpu_seconds(pids: Sequence[int]) -> float:
    """User + system CPU time of ``pids`` (seconds)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])
    return total / tick
