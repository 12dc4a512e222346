"""Command-line behaviour: usage errors, exit codes, error format, batch replay, --ebpf."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gputop.model import Snapshot, SourceStatus, snapshot_from_json, snapshot_to_json
from gputop.view.columns import sort_processes

ROOT = Path(__file__).resolve().parent.parent.parent


def gputop(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gputop.cli", *args], capture_output=True, text=True,
                          cwd=cwd, timeout=120, stdin=subprocess.DEVNULL)


def assert_error(res: subprocess.CompletedProcess[str], code: int, message: str) -> None:
    assert res.returncode == code, res.stderr
    lines = res.stderr.splitlines()
    assert len(lines) == 2, res.stderr
    assert lines[0].startswith("gputop: error: ") and message in lines[0]
    assert lines[1].startswith("hint: ")
    assert "Traceback" not in res.stderr


@pytest.mark.parametrize(("args", "message"), [
    (["-d", "0"], "must be from 0.05 to 86400 seconds: '0'"),
    (["-d", "-1"], "must be from 0.05 to 86400 seconds: '-1'"),
    (["-d", "nan"], "must be from 0.05 to 86400 seconds: 'nan'"),
    (["-d", "inf"], "must be from 0.05 to 86400 seconds: 'inf'"),
    (["--delay=-inf"], "must be from 0.05 to 86400 seconds: '-inf'"),
    (["-d", "-inf"], "argument -d/--delay: expected one argument"),     # argparse: an option, not a value
    (["-d", "1e-300"], "must be from 0.05 to 86400 seconds: '1e-300'"),
    (["-d", "86401"], "must be from 0.05 to 86400 seconds: '86401'"),
    (["-d", "abc"], "not a number"),
    (["-d"], "expected one argument"),
    (["-p", "abc"], "not a PID (1 to 4194304): 'abc'"),
    (["-p", "-1"], "not a PID (1 to 4194304): '-1'"),
    (["-p", "0"], "not a PID (1 to 4194304): '0'"),
    (["-p", "4194305"], "not a PID (1 to 4194304): '4194305'"),
    (["-p", "1_0"], "not a PID (1 to 4194304): '1_0'"),
    (["-p", "١٢"], "not a PID (1 to 4194304): '١٢'"),
    (["-p", ","], "expected comma-separated PIDs: ','"),
    (["--baseline-pid", "-5", "--baseline", "x"], "not a PID (1 to 4194304): '-5'"),
    (["-s", "\x1b[31mred"], "unknown sort column '\\x1b[31mred'"),     # quoted as an escape, never raw
    (["--theme", "dark\u202e"], "unknown theme 'dark\\u202e'"),
    (["-b", "--replay", "."], "--replay: not a file: ."),
    (["-n", "0", "-b"], "must be at least 1"),
    (["-p", "12,x"], "not a PID (1 to 4194304): 'x'"),
    (["-f", "xml", "-b"], "invalid choice"),
    (["--bpf", "--no-bpf"], "not allowed with argument"),
    (["--frobnicate"], "unrecognized arguments"),
    (["-s", "nosuchcolumn"], "unknown sort column 'nosuchcolumn'"),
    (["-n", "3"], "-n only applies to batch mode"),
    (["-b", "--replay", "/nonexistent.jsonl"], "no such file"),
    (["doctor", "--now"], "unrecognized arguments: --now"),
    (["--theme", "neon"], "unknown theme 'neon'"),
    (["--baseline-pid", "5"], "--baseline-pid needs --baseline FILE"),
    (["-f", "json"], "-f only applies to batch mode"),
    (["-u", "4294967295"], "no such user: '4294967295'"),
])
def test_usage_errors_exit_2(args: list[str], message: str) -> None:
    assert_error(gputop(*args), 2, message)


def assert_exact_error(res: subprocess.CompletedProcess[str], message: str, hint: str) -> None:
    assert res.returncode == 2, res.stderr
    assert res.stderr.splitlines() == [f"gputop: error: {message}", f"hint: {hint}"]
    assert res.stdout == ""


@pytest.mark.parametrize("mode", [["-b"], []])
def test_unknown_user_fails_at_argument_parsing(mode: list[str]) -> None:
    assert_exact_error(gputop(*mode, "-u", "nosuchuser", "--no-bpf", "--no-nvml"), "no such user: 'nosuchuser'",
                       "give a user name or a numeric uid of this host (getent passwd lists them)")


@pytest.mark.parametrize("option", [["--baseline", "run.jsonl"], ["--baseline-pid", "5"]])
def test_baseline_is_refused_in_batch_mode(option: list[str], tmp_path: Path) -> None:
    (tmp_path / "run.jsonl").write_text("")
    hint = ("drop -b to compare in the dashboard; in batch mode, record both runs (gputop -b -f json --record FILE) "
            "and compare the files")
    assert_exact_error(gputop("-b", "-n", "1", *option, cwd=tmp_path), f"{option[0]} works in the dashboard only",
                       hint)


def test_user_names_and_uids() -> None:
    import pwd

    from gputop.errors import GputopError
    from gputop.modes.args import user as _user

    root = pwd.getpwuid(0).pw_name
    assert _user(root) == root and _user("0") == root          # a uid becomes the name psutil reports
    free = next(u for u in range(4_000_000, 4_001_000) if not _has_uid(u))
    assert _user(str(free)) == str(free)                       # a uid without a name (a container's) stays a number
    assert _user("nosuchuser", replay=True) == "nosuchuser"    # a recording may come from another host
    for bad in ("nosuchuser", "4294967295", "-1", "١", "a\x00b"):
        with pytest.raises(GputopError) as e:
            _user(bad)
        assert e.value.code == 2 and e.value.message == f"no such user: {bad!r}"


def _has_uid(uid: int) -> bool:
    import pwd

    try:
        pwd.getpwuid(uid)
    except KeyError:
        return False
    return True


def test_batch_accepts_a_numeric_uid() -> None:
    res = gputop("-b", "-n", "1", "-d", "0.1", "--no-bpf", "--no-nvml", "-u", "0")
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    # the summary line: without BPF nothing is counted, so no total is known
    assert lines[1] == ("Tasks: 0 listed, 0 running, 0 stopped, 0 exited  Launches: N/A  Graph kernels: N/A  "
                        "H2D N/A  D2H N/A  D2D N/A  GPUs busy: N/A")
    assert lines[2].split()[0] == "PID"


def test_batch_table_is_sorted_by_s(tmp_path: Path) -> None:
    src = sorted((ROOT / "tests" / "data").glob("*.jsonl"))[0]
    snap = snapshot_from_json(src.read_text().splitlines()[2])
    def pids(*args: str) -> list[int]:
        res = gputop("-b", "-n", "3", "--replay", str(src), *args)
        assert res.returncode == 0, res.stderr
        last = res.stdout.rsplit("gputop - ", 1)[1].splitlines()
        at = next(i for i, line in enumerate(last) if line.split()[:1] == ["PID"])
        return [int(line.split()[0]) for line in last[at + 1:] if line.strip()]
    assert pids() == [p.pid for p in sort_processes(snap.processes, "launches")]
    assert pids("-s", "pid") == sorted(p.pid for p in snap.processes)
    assert pids("-s", "cpu") == [p.pid for p in sort_processes(snap.processes, "cpu")] != pids("-s", "pid")


def test_p_of_no_running_process_says_so() -> None:
    """``-p 999999`` on the live host: no such process (issue 35), not an empty table forever; one of several
    running is enough (it is watched), and a recording's or the fleet's PIDs are not this host's."""
    pid_max = int(Path("/proc/sys/kernel/pid_max").read_text())
    gone = next(p for p in range(pid_max, 1, -1) if not Path(f"/proc/{p}").exists())
    assert_error(gputop("-b", "-n", "1", "--no-bpf", "--no-nvml", "-p", str(gone)), 1, f"no such process: {gone}")
    res = gputop("-b", "-n", "1", "--no-bpf", "--no-nvml", "-p", f"{gone},1")
    assert res.returncode == 0 and "Traceback" not in res.stderr


def test_python_m_gputop_is_the_command() -> None:
    res = subprocess.run([sys.executable, "-m", "gputop", "--version"], capture_output=True, text=True, cwd=ROOT,
                         timeout=60)
    assert res.returncode == 0 and res.stdout.startswith("gputop ")


def test_dashboard_without_terminal_is_a_usage_error() -> None:
    assert_error(gputop("--no-bpf"), 2, "the dashboard needs a terminal")


def test_bad_recording_is_an_error_not_a_traceback(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{not json\n")
    assert_error(gputop("-b", "--replay", str(bad)), 1, str(bad))


SCENARIO = ROOT / "tests" / "data" / "scenario.jsonl"
NOT_A_RECORDING = "record one with: gputop --record FILE (JSON Lines, schema gputop/1)"


@pytest.mark.parametrize(("content", "message", "hint"), [
    (bytes(range(255, -1, -1)) * 64, "r.jsonl:1: not UTF-8 text: not a recording", NOT_A_RECORDING),
    (b"\x1f\x8b\x08\x00garbage\xff", "r.jsonl:1: not UTF-8 text: not a recording", NOT_A_RECORDING),
    (b"PK\x03\x04 a zip, say\n", "r.jsonl:1: not JSON (Expecting value at column 1)",
     "a recording holds one JSON snapshot per line (gputop --record FILE)"),
    (b'{"schema":"gputop/2","time":1,"interval_s":1,"host":"h"}\n',
     "r.jsonl:1: written by a newer gputop (schema 'gputop/2'; this gputop reads 'gputop/1')",
     "replay it with the gputop version that recorded it, or upgrade gputop"),
    (b"", "r.jsonl: empty recording (no snapshots)", NOT_A_RECORDING),
], ids=["binary", "gzip-bytes", "zip", "future-schema", "empty"])
def test_garbage_and_future_recordings_exit_1(tmp_path: Path, content: bytes, message: str, hint: str) -> None:
    (tmp_path / "r.jsonl").write_bytes(content)
    for form in ("json", "table"):
        res = gputop("-b", "-f", form, "--replay", "r.jsonl", cwd=tmp_path)
        assert res.returncode == 1 and res.stdout == ""
        assert res.stderr.splitlines() == [f"gputop: error: {message}", f"hint: {hint}"]


def test_garbage_gzip_recording_exits_1(tmp_path: Path) -> None:
    (tmp_path / "r.jsonl.gz").write_bytes(b"not gzip at all\n")
    res = gputop("-b", "--replay", "r.jsonl.gz", cwd=tmp_path)
    assert res.returncode == 1 and res.stdout == ""
    assert res.stderr.splitlines() == ["gputop: error: r.jsonl.gz: not a readable recording (Not a gzipped file "
                                       "(b'no'))", f"hint: {NOT_A_RECORDING}"]


def test_unreadable_recording_exits_1(tmp_path: Path) -> None:
    """As a user who may not read it (root reads everything: setpriv drops to nobody)."""
    import shutil

    if shutil.which("setpriv") is None or not hasattr(__import__("os"), "geteuid") or __import__("os").geteuid():
        pytest.skip("needs root and setpriv to become another user")
    import tempfile

    def as_nobody(path: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable, "-m",
                               "gputop.cli", "-b", "--replay", str(path)], capture_output=True, text=True, cwd=ROOT,
                              timeout=60, stdin=subprocess.DEVNULL, env={"PYTHONPATH": str(ROOT), "HOME": "/"})

    with tempfile.TemporaryDirectory(dir="/tmp") as d:     # pytest's tmp_path lies in a folder only root enters
        Path(d).chmod(0o755)
        rec = Path(d) / "r.jsonl"
        rec.write_bytes(SCENARIO.read_bytes()[:100_000])
        rec.chmod(0o000)
        res = as_nobody(rec)
        assert res.returncode == 1 and res.stdout == ""
        assert res.stderr.splitlines() == [f"gputop: error: cannot read recording {rec}: permission denied",
                                           "hint: make it readable to this user (ls -l shows its owner and mode)"]
        Path(d).chmod(0o700)                                 # now the folder cannot be entered
        res = as_nobody(rec)
        assert res.returncode == 1 and res.stdout == ""
        assert res.stderr.splitlines() == [f"gputop: error: --replay: cannot read {rec}: permission denied",
                                           "hint: make it readable to this user (ls -ld shows each folder's owner "
                                           "and mode)"]


def test_a_last_line_cut_short_is_a_notice_and_the_rest_replays(tmp_path: Path) -> None:
    lines = SCENARIO.read_text().splitlines(keepends=True)[:5]
    (tmp_path / "r.jsonl").write_text("".join(lines[:4]) + lines[4][:1000])     # the recorder killed mid-line
    res = gputop("-b", "-f", "json", "--replay", "r.jsonl", cwd=tmp_path)
    assert res.returncode == 0
    assert [snapshot_from_json(out) for out in res.stdout.splitlines()] == [snapshot_from_json(x) for x in lines[:4]]
    # the cut line by its number, and the column where it stops (1000 characters written)
    assert res.stderr.splitlines() == ["gputop: r.jsonl:5: the last line is cut short at column 1001 (nothing "
                                       "follows: the recorder stopped mid-write); replaying the 4 complete "
                                       "snapshot(s) before it"]


def test_batch_replays_a_recording_with_filters(tmp_path: Path) -> None:
    rec = tmp_path / "rec.jsonl"
    src = sorted((ROOT / "tests" / "data").glob("*.jsonl"))[0]
    snaps = [snapshot_from_json(line) for line in src.read_text().splitlines()[:3]]
    rec.write_text("".join(snapshot_to_json(s) + "\n" for s in snaps))
    pid = snaps[0].processes[0].pid
    res = gputop("-b", "-f", "json", "-n", "2", "-p", str(pid), "--replay", str(rec))
    assert res.returncode == 0, res.stderr
    out = [json.loads(line) for line in res.stdout.splitlines()]
    assert len(out) == 2
    assert all([p["pid"] for p in o["processes"]] == [pid] for o in out)
    assert out[0]["time"] == snaps[0].time


def test_batch_user_filter(tmp_path: Path) -> None:
    src = sorted((ROOT / "tests" / "data").glob("*.jsonl"))[0]
    snap = snapshot_from_json(src.read_text().splitlines()[2])
    user = next(p.user for p in snap.processes if p.user)
    res = gputop("-b", "-f", "json", "-n", "3", "-u", user, "--replay", str(src))
    assert res.returncode == 0, res.stderr
    out = [json.loads(line) for line in res.stdout.splitlines()]
    third = [p["pid"] for p in out[2]["processes"]]
    assert third == [p.pid for p in snap.processes if p.user == user] and third


def test_batch_record_writes_what_it_prints(tmp_path: Path) -> None:
    rec = tmp_path / "out.jsonl"
    res = gputop("-b", "-f", "json", "-n", "2", "-d", "0.2", "--no-bpf", "--no-nvml", "--record", str(rec))
    assert res.returncode == 0, res.stderr
    printed = res.stdout.splitlines()
    assert rec.read_text().splitlines() == printed
    snap: Snapshot = snapshot_from_json(printed[1])
    assert snap.sources["bpf"] == SourceStatus("unavailable", "disabled with --no-bpf")
    assert snap.sources["nvml"] == SourceStatus("unavailable", "disabled with --no-nvml")


def test_ebpf_prints_the_program() -> None:
    res = gputop("--ebpf")
    assert res.returncode == 0
    assert res.stdout.startswith("// cflags: -DMAX_PROCS=4096")
    assert "int rt_launch(struct pt_regs *ctx)" in res.stdout


def test_version_and_help() -> None:
    assert gputop("--version").stdout.strip() == "gputop 0.1.0"
    help_text = gputop("--help").stdout
    for opt in ("-d SECONDS", "-p PID", "-s COLUMN", "--record FILE", "--replay FILE", "--baseline FILE",
                "--bpf", "--no-nvml", "--theme", "--readonly"):
        assert opt in help_text


@pytest.mark.parametrize(("args", "message"), [
    (["--listen", "9464"], "expected HOST:PORT"),
    (["--listen", "::1:9464"], "write an IPv6 address in brackets, [::1]:9464"),
    (["--listen", "127.0.0.1:0"], "expected HOST:PORT with a port from 1 to 65535"),
    (["-d", "0.01"], "must be at least 0.1 seconds"),
    (["--exited-grace", "-1"], "must be between 0 and 604800 seconds"),
    (["--exited-grace", "inf"], "must be between 0 and 604800 seconds"),
    (["--kernel-metrics", "-3"], "expected a whole number"),
    (["--max-processes", "x"], "expected a whole number"),
    (["--bpf", "--no-bpf"], "not allowed with argument"),
    (["--frobnicate"], "unrecognized arguments"),
])
def test_exporter_usage_errors_exit_2(args: list[str], message: str) -> None:
    assert_error(gputop("exporter", *args), 2, message)


def test_exporter_help_names_its_options() -> None:
    res = gputop("exporter", "--help")
    assert res.returncode == 0
    for option in ("--listen HOST:PORT", "--exited-grace", "--kernel-metrics", "--max-processes", "--cmdline-label",
                   "--node"):
        assert option in res.stdout


@pytest.mark.parametrize("mode", [["-b", "-n", "1"], []])
def test_record_into_the_replayed_file_is_refused_before_it_is_truncated(tmp_path: Path, mode: list[str]) -> None:
    rec = tmp_path / "run.jsonl"
    rec.write_bytes(SCENARIO.read_bytes())
    (tmp_path / "link.jsonl").symlink_to(rec)
    res = gputop(*mode, "--replay", "run.jsonl", "--record", "link.jsonl", cwd=tmp_path)
    assert_exact_error(res, "--record link.jsonl would overwrite the recording given to --replay",
                       "record into another file")
    assert rec.read_bytes() == SCENARIO.read_bytes()
