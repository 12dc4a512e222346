"""scripts/matrix/vm.py's run_logged: how a boot ends — the guest's status, the timeout, or a kernel
that locked up (CI once waited 1500 s on a guest whose two CPUs looped in the emulator: docs/matrix.md,
"A guest that locks up")."""

from __future__ import annotations

import importlib.util
import sys
import time
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent.parent
REPORT = "[  176.688819] watchdog: BUG: soft lockup - CPU#1 stuck for 22s! [wl_dynamic:279]"


def _vm() -> ModuleType:
    spec = importlib.util.spec_from_file_location("matrix_vm", ROOT / "scripts" / "matrix" / "vm.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["matrix_vm"] = mod
    spec.loader.exec_module(mod)
    return mod


def _reports(n: int, then: str) -> list[str]:
    return ["sh", "-c", f"for i in $(seq {n}); do echo '{REPORT}'; done; {then}"]


def test_the_guests_own_status(tmp_path: Path) -> None:
    vm = _vm()
    ended, wall_s = vm.run_logged(["sh", "-c", "echo booted; exit 3"], tmp_path / "console.log", 30)
    assert ended == 3
    assert (tmp_path / "console.log").read_text() == "booted\n"
    assert wall_s < 30


def test_fewer_lockup_reports_than_the_limit_are_waited_out(tmp_path: Path) -> None:
    """A CPU stuck for 22 s once is slow emulation, not a lockup: the guest goes on to its status."""
    vm = _vm()
    ended, _ = vm.run_logged(_reports(vm.LOCKUP_REPORTS - 1, "sleep 6; exit 0"), tmp_path / "console.log", 60)
    assert ended == 0


def test_a_guest_that_locked_up_is_killed_without_waiting_for_the_timeout(tmp_path: Path) -> None:
    vm = _vm()
    t0 = time.monotonic()
    ended, _ = vm.run_logged(_reports(vm.LOCKUP_REPORTS, "sleep 600"), tmp_path / "console.log", 300)
    assert ended == "locked up"
    assert time.monotonic() - t0 < 60     # polled every 5 s: not the 300 s timeout, not the sleep


def test_the_timeout(tmp_path: Path) -> None:
    vm = _vm()
    ended, wall_s = vm.run_logged(["sleep", "600"], tmp_path / "console.log", 2)
    assert ended == "timed out"
    assert 2 <= wall_s < 30
