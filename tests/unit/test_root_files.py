"""Files as root (issue 25, item 9): gputop never follows a path another user controls.

Each attack of the security review is played here as root: a directory tree of another user's
(uid 65534, nobody) under tmp_path, a link or file planted in it as that user (``os.lchown``), HOME
and XDG_* pointed at it as ``sudo -E`` does, and the real code path run. Root's own files must come
out byte for byte and mode for mode as they were.
"""

from __future__ import annotations

import json
import math
import os
import pwd
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from gputop import config, safefiles
from gputop.config import Config, load_config, save_config
from gputop.model import Snapshot, SourceStatus, snapshot_from_json, snapshot_to_json
from gputop.record import Recorder, RecordingError, read_recording
from gputop.sources.bpf.cost import trapcost
from gputop.sources.bpf.cost.trapcost import Calibration, TrapCost
from gputop.sources.bpf.program import compilecache as bpfcache
from gputop.sources.bpf.program import kheaders

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="plays attacks on root: needs root")

ROOT = Path(__file__).resolve().parents[2]
SCENARIO = ROOT / "tests" / "data" / "scenario.jsonl"
NOBODY = 65534
SECRET = b'theme = "root-only"\n# a root 0600 file\n'
RELEASE = "6.18.44-custom"
HEADERS = "linux-headers-6.1.0-56-amd64"


# ------------------------------------------------------------------ the stage


def as_nobody(path: Path) -> Path:
    os.lchown(path, NOBODY, NOBODY)
    return path


def user_dirs(base: Path, *parts: str) -> Path:
    """``base/parts...``, every directory made and owned by nobody."""
    d = base
    for part in parts:
        d = d / part
        d.mkdir(exist_ok=True)
        as_nobody(d)
    return d


def plant_link(link: Path, target: Path) -> Path:
    link.symlink_to(target)
    return as_nobody(link)


def root_file(path: Path, data: bytes = SECRET, mode: int = 0o600) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    path.chmod(mode)
    return path


def state(path: Path) -> tuple[bytes, int, int]:
    st = path.stat()
    return path.read_bytes(), stat.S_IMODE(st.st_mode), st.st_uid


@pytest.fixture
def alice(tmp_path: Path) -> Path:
    """Another user's home directory (owned by nobody)."""
    return user_dirs(tmp_path, "alice")


@pytest.fixture
def root_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Root's home from the passwd database, here a directory of the test's."""
    home = tmp_path / "root-home"
    home.mkdir(mode=0o700)
    monkeypatch.setattr(config, "_root_home", lambda: home)
    return home


@pytest.fixture
def root_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Root's cache directory (/var/cache), here a directory of the test's."""
    cache = tmp_path / "var-cache"
    cache.mkdir(mode=0o755)
    monkeypatch.setattr(safefiles, "ROOT_CACHE", cache)
    monkeypatch.delenv("BCC_KERNEL_SOURCE", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    return cache


@pytest.fixture(autouse=True)
def _umask() -> object:
    old = os.umask(0o022)           # root's usual umask: what makes a careless copy 0644
    yield
    os.umask(old)


# ------------------------------------------------------------------ safefiles


def test_trust_follows_each_component_from_the_root(tmp_path: Path, alice: Path) -> None:
    mine = tmp_path / "mine"
    mine.mkdir(mode=0o755)
    assert safefiles.untrusted_reason(mine) is None                 # /tmp (sticky) on the way is fine
    assert safefiles.untrusted_reason("/tmp") == "/tmp is writable by other users (mode 1777)"
    assert safefiles.untrusted_reason(alice) == f"{alice} is owned by uid 65534"
    assert safefiles.untrusted_reason(alice / "x" / "y", missing_ok=True) == f"{alice} is owned by uid 65534"
    assert safefiles.untrusted_reason(mine / "x" / "y", missing_ok=True) is None
    assert safefiles.untrusted_reason(mine / "x") == f"{mine}/x does not exist"
    (mine / "shared").mkdir(mode=0o777)
    os.chmod(mine / "shared", 0o777)
    (mine / "shared" / "sub").mkdir(mode=0o755)
    assert safefiles.untrusted_reason(mine / "shared" / "sub") == \
        f"{mine}/shared is writable by other users (mode 0777)"
    (mine / "root-link").symlink_to(mine / "shared" / "sub")        # root's own link: followed, its target checked
    assert safefiles.untrusted_reason(mine / "root-link") == f"{mine}/shared is writable by other users (mode 0777)"
    (mine / "ok-link").symlink_to(tmp_path)
    assert safefiles.untrusted_reason(mine / "ok-link" / "mine") is None
    plant_link(alice / "to-mine", mine)
    assert safefiles.untrusted_reason(alice / "to-mine") == f"{alice} is owned by uid 65534"
    plant_link(mine / "planted", mine)                              # a link of nobody's, even in root's directory
    assert safefiles.untrusted_reason(mine / "planted") == f"{mine}/planted is a symbolic link owned by uid 65534"


def test_read_file_refuses_links_foreign_writable_and_large_files(tmp_path: Path) -> None:
    d = tmp_path / "cache"
    d.mkdir()
    f = root_file(d / "f.json", b"{}")
    assert safefiles.read_file(f, max_bytes=2) == b"{}"
    with pytest.raises(safefiles.UnsafePathError, match=r"f.json is larger than 1 bytes$"):
        safefiles.read_file(f, max_bytes=1)
    f.chmod(0o620)
    with pytest.raises(safefiles.UnsafePathError, match=r"f.json is writable by other users \(mode 0620\)$"):
        safefiles.read_file(f, max_bytes=10)
    f.chmod(0o600)
    as_nobody(f)
    with pytest.raises(safefiles.UnsafePathError, match=r"f.json is owned by uid 65534$"):
        safefiles.read_file(f, max_bytes=10)
    (d / "link").symlink_to(root_file(tmp_path / "other", b"{}"))
    with pytest.raises(safefiles.UnsafePathError) as e:
        safefiles.read_file(d / "link", max_bytes=10)
    assert str(e.value) == f"{d}/link is a symbolic link (not followed)" and e.value.filename == str(d / "link")
    os.mkfifo(d / "fifo", 0o600)                                   # O_NONBLOCK: refused, not waited on
    with pytest.raises(safefiles.UnsafePathError, match=r"fifo is not a regular file$"):
        safefiles.read_file(d / "fifo", max_bytes=10)


def test_write_atomic_replaces_a_link_and_never_writes_through_it(tmp_path: Path) -> None:
    victim = root_file(tmp_path / "victim")
    d = tmp_path / "d"
    d.mkdir()
    (d / "out").symlink_to(victim)
    safefiles.write_atomic(d / "out", b"new")
    assert state(victim) == (SECRET, 0o600, 0)
    assert not (d / "out").is_symlink() and state(d / "out") == (b"new", 0o600, 0)
    assert os.listdir(d) == ["out"]


# ------------------------------------------------------------------ config (sudo -E: HOME is a user's)


def test_config_dir_as_root_passes_over_a_users_home(alice: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: ~alice/.config/gputop. After: root's own home, from the passwd database."""
    monkeypatch.setenv("HOME", str(alice))
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    own = Path(pwd.getpwuid(0).pw_dir) / ".config" / "gputop"
    assert config.config_dir() == own
    monkeypatch.setenv("XDG_CONFIG_HOME", str(user_dirs(alice, ".config")))
    assert config.config_dir() == own
    assert config.config_path() == own / "config.toml"


def test_config_load_says_why_a_users_config_is_passed_over(alice: Path, root_home: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(alice))
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    user_dirs(alice, ".config", "gputop")
    as_nobody(root_file(alice / ".config" / "gputop" / "config.toml", b'theme = "alices"\n', 0o644))
    assert load_config() == (Config(), [
        f"config: {alice}/.config/gputop is not used as root ({alice} is owned by uid 65534); "
        f"using {root_home}/.config/gputop"])


def test_config_save_with_a_users_home_leaks_and_overwrites_nothing(tmp_path: Path, alice: Path, root_home: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """The review's attack: config.toml is alice's link to a root 0600 file, and the temporary name
    gputop writes through is her link to another root file. Before: the secret was copied to a 0644
    config.toml.bak in her directory and the other root file overwritten with gputop's settings."""
    secret = root_file(tmp_path / "root-secret")
    victim = root_file(tmp_path / "root-victim", b"root data\n")
    monkeypatch.setenv("HOME", str(alice))
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    planted = user_dirs(alice, ".config", "gputop")
    plant_link(planted / "config.toml", secret)
    plant_link(planted / f".config.toml.{os.getpid()}.tmp", victim)
    backup = save_config(Config(theme="light"))
    assert state(victim) == (b"root data\n", 0o600, 0)
    assert state(secret) == (SECRET, 0o600, 0)
    leaked = [p for p in tmp_path.rglob("*") if p.is_file() and not p.is_symlink() and p.read_bytes() == SECRET]
    assert leaked == [secret]
    assert sorted(os.listdir(planted)) == [f".config.toml.{os.getpid()}.tmp", "config.toml"]
    assert backup is None
    saved = root_home / ".config" / "gputop" / "config.toml"
    assert state(saved)[1:] == (0o600, 0) and load_config(saved) == (Config(theme="light"), [])


def test_a_symlinked_config_is_not_followed_as_root(tmp_path: Path) -> None:
    """Before: read through the link (theme "dark" from the link's target)."""
    target = root_file(tmp_path / "elsewhere.toml", b'theme = "dark"\n')
    d = tmp_path / "cfg"
    d.mkdir()
    link = d / "config.toml"
    link.symlink_to(target)
    assert load_config(link) == (Config(), [
        f"config: cannot read {link}: {link} is a symbolic link (not followed); using defaults (as root, gputop "
        f"reads only root's own regular files, never through a link; the file is kept)"])
    with pytest.raises(safefiles.UnsafePathError) as e:
        save_config(Config(theme="light"), link)
    assert str(e.value) == f"{link} is a symbolic link (not followed)"
    assert link.is_symlink() and os.readlink(link) == str(target) and os.listdir(d) == ["config.toml"]
    assert state(target) == (b'theme = "dark"\n', 0o600, 0)


def test_config_and_its_backup_are_written_0600(root_home: Path) -> None:
    """Before: both 0644 (root's umask), the backup holding whatever the file held."""
    path = root_home / ".config" / "gputop" / "config.toml"
    root_file(path, b'# my notes\ntheme = "dark"\n')
    assert save_config(Config(sort="pid"), path) == path.with_name("config.toml.bak")
    assert state(path.with_name("config.toml.bak")) == (b'# my notes\ntheme = "dark"\n', 0o600, 0)
    assert state(path)[1:] == (0o600, 0)


# ------------------------------------------------------------------ --record


def gputop(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gputop.cli", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=300, stdin=subprocess.DEVNULL, env={**os.environ, **env})


RECORD_HINT = ("hint: gputop writes a recording only into a regular file of its own, never through a link: "
               "choose another path (ls -l shows what is there)")


def test_record_through_a_planted_link_is_refused(tmp_path: Path, alice: Path) -> None:
    """Before: --record followed alice's link and overwrote the root file (exit 0)."""
    victim = root_file(tmp_path / "root-victim")
    link = plant_link(alice / "rec.jsonl", victim)
    res = gputop("--replay", str(SCENARIO), "-b", "-n", "1", "--record", str(link))
    assert state(victim) == (SECRET, 0o600, 0) and link.is_symlink()
    assert res.returncode == 1
    assert res.stderr.splitlines() == [
        f"gputop: error: cannot write recording {link}: {link} is a symbolic link (not followed)", RECORD_HINT]
    assert res.stdout == ""


def test_recorder_as_root_refuses_another_users_file(alice: Path) -> None:
    """Before: alice's own file (which she can read) was filled with everyone's command lines."""
    theirs = as_nobody(root_file(alice / "rec.jsonl", b"hers\n", 0o644))
    with pytest.raises(RecordingError) as e:
        Recorder(theirs)
    assert e.value.message == f"cannot write recording {theirs}: {theirs} is owned by uid 65534"
    assert "hint: " + e.value.hint == RECORD_HINT
    assert state(theirs) == (b"hers\n", 0o644, NOBODY)


def test_recorder_refuses_a_second_name_of_a_root_file(tmp_path: Path) -> None:
    """Before: a hard link (where fs.protected_hardlinks is off) let a recording overwrite the file."""
    victim = root_file(tmp_path / "root-victim")
    (tmp_path / "out").mkdir()
    os.link(victim, tmp_path / "out" / "rec.jsonl")
    with pytest.raises(RecordingError) as e:
        Recorder(tmp_path / "out" / "rec.jsonl")
    out = tmp_path / "out" / "rec.jsonl"
    assert e.value.message == f"cannot write recording {out}: {out} has 2 hard links"
    assert state(victim) == (SECRET, 0o600, 0)


def test_recorder_refuses_a_users_link_on_the_way(tmp_path: Path, alice: Path) -> None:
    """Before: ~alice/out -> a root directory, and root's rec.jsonl there was truncated."""
    rootdir = tmp_path / "rootdir"
    victim = root_file(rootdir / "rec.jsonl")
    plant_link(alice / "out", rootdir)
    with pytest.raises(RecordingError) as e:
        Recorder(alice / "out" / "rec.jsonl")
    assert e.value.message == (f"cannot write recording {alice}/out/rec.jsonl: "
                               f"{alice}/out is a symbolic link owned by uid 65534")
    assert state(victim) == (SECRET, 0o600, 0)


def snap(i: int) -> Snapshot:
    return Snapshot(time=1000.0 + i, interval_s=1.0, host="h")


def test_recorder_creates_0600_and_appends(tmp_path: Path) -> None:
    """Before: created 0644 and truncated at every start (a restarted unit lost what it recorded)."""
    path = tmp_path / "rec.jsonl"
    with Recorder(path) as rec:
        rec.write(snap(0))
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    cut = snapshot_to_json(snap(1))[:40]             # a recorder killed mid-line
    with path.open("a") as f:
        f.write(cut)
    with Recorder(path) as rec:                      # restarted: appends, dropping the cut line first
        rec.write(snap(2))
    assert list(read_recording(path)) == [snap(0), snap(2)]
    assert path.read_text().count("\n") == 2


# ------------------------------------------------------------------ the trap cost cache


def planted_trap_cost(cache: Path, **figures: float) -> Path:
    entry = {"trap_ns": 700.0, "return_ns": 600.0, "attach": "links", "rounds": 9, "calls": 20000,
             "measured_at": 1.0, "call_ns": 2.0, **figures}
    return root_file(cache / "gputop" / "trap-cost.json",
                     json.dumps({trapcost.cache_key("links"): entry}).encode(), 0o644)


MEASURED = TrapCost(812.5, 640.0, "links", 9, 20000, 5.0, call_ns=2.5)


def test_a_planted_trap_cost_is_not_used(alice: Path, root_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: alice's trap-cost.json (trap_ns Infinity) was taken, and batch JSON crashed on it."""
    user_dirs(alice, ".cache", "gputop")
    planted = as_nobody(planted_trap_cost(alice / ".cache", trap_ns=math.inf))
    monkeypatch.setenv("XDG_CACHE_HOME", str(alice / ".cache"))
    cal = Calibration("links", measure_fn=lambda mode: MEASURED)
    cal.start(measure=False)                         # the cache only: nothing there that root may use
    assert cal.cost is None and not cal.done.is_set()
    assert trapcost.cache_dir() == root_cache / "gputop"
    cal.start()
    assert cal.done.wait(5) and cal.cost == MEASURED
    assert trapcost.load_cached("links") == TrapCost(**{**MEASURED.__dict__, "cached": True})
    assert stat.S_IMODE((root_cache / "gputop" / "trap-cost.json").stat().st_mode) == 0o600
    assert planted.stat().st_uid == NOBODY and json.loads(planted.read_text())[trapcost.cache_key("links")][
        "trap_ns"] == math.inf
    line = snapshot_to_json(Snapshot(time=1.0, interval_s=1.0, host="h",
                                     sources={"bpf": SourceStatus("ok", trap_ns=cal.cost.trap_ns)}))
    assert snapshot_from_json(line).sources["bpf"].trap_ns == 812.5


@pytest.mark.parametrize("figures", [{"trap_ns": math.inf}, {"trap_ns": -math.inf}, {"trap_ns": math.nan},
                                     {"trap_ns": -700.0}, {"trap_ns": 0.0}, {"trap_ns": 1e12},
                                     {"return_ns": math.inf}, {"return_ns": -1.0}, {"call_ns": math.nan},
                                     {"rounds": 0}, {"calls": -5}, {"measured_at": math.inf}],
                         ids=lambda f: ",".join(f"{k}={v}" for k, v in f.items()))
def test_a_cached_trap_cost_out_of_range_is_measured_again(tmp_path: Path, figures: dict[str, float]) -> None:
    """Before: any number was taken (inf, NaN, negative, absurd)."""
    planted_trap_cost(tmp_path, **figures)
    assert trapcost.load_cached("links", tmp_path / "gputop") is None
    cal = Calibration("links", tmp_path / "gputop", measure_fn=lambda mode: MEASURED)
    cal.start()
    assert cal.done.wait(5) and cal.cost == MEASURED
    assert trapcost.load_cached("links", tmp_path / "gputop") == TrapCost(**{**MEASURED.__dict__, "cached": True})


def test_batch_json_stays_valid_with_a_planted_trap_cost(alice: Path) -> None:
    """The review's crash, end to end: gputop -b -f json as root with alice's XDG_CACHE_HOME."""
    from gputop.sources.bpf import BpfUnavailable, has_privileges, load_bcc

    try:
        load_bcc()
    except BpfUnavailable as e:
        pytest.skip(e.reason)
    if not has_privileges():
        pytest.skip("tracing privileges")
    user_dirs(alice, ".cache", "gputop")
    as_nobody(planted_trap_cost(alice / ".cache", trap_ns=math.inf))
    res = gputop("-b", "-n", "1", "-f", "json", "--no-nvml", "--bpf", HOME=str(alice),
                 XDG_CACHE_HOME=str(alice / ".cache"))
    assert res.returncode == 0, res.stderr
    bpf = json.loads(res.stdout)["sources"]["bpf"]
    assert bpf["status"] == "ok" and (bpf["trap_ns"] is None or 0 < bpf["trap_ns"] < 1e6)
    assert sorted(os.listdir(alice / ".cache" / "gputop")) == ["trap-cost.json"]   # nothing of root's written there


# ------------------------------------------------------------------ the BPF program cache


def test_a_bpf_cache_inside_a_users_directory_is_not_read(alice: Path, root_cache: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: root's own files in a directory alice can rename (the cache root once made in her
    XDG_CACHE_HOME) were loaded into the kernel."""
    data = {"license": "GPL", "funcs": {"f": {"code": "", "maps": []}}, "key": "bpf-k1"}
    d = user_dirs(alice, ".cache", "gputop") / "bpf"
    d.mkdir(mode=0o700)
    root_file(d / "bpf-k1.json", json.dumps(data).encode())
    monkeypatch.setenv("XDG_CACHE_HOME", str(alice / ".cache"))
    assert bpfcache.read("bpf-k1", d) is None
    assert bpfcache.read("bpf-k1") is None
    assert bpfcache.cache_dir() == root_cache / "gputop" / "bpf"
    bpfcache.write("bpf-k1", data)
    assert bpfcache.read("bpf-k1") == data and os.listdir(d) == ["bpf-k1.json"]
    assert stat.S_IMODE((root_cache / "gputop" / "bpf").stat().st_mode) == 0o700


# ------------------------------------------------------------------ kernel headers


def headers_tree(usr_src: Path, owner: int = 0) -> None:
    """Debian's split headers: the arch half and the -common half."""
    build = usr_src / HEADERS
    (build / "include" / "generated").mkdir(parents=True)
    (build / "Makefile").write_text("include ../common/Makefile\n")
    (build / "include" / "generated" / "autoconf.h").write_text("#define X 1\n")
    common = usr_src / HEADERS.replace("-amd64", "-common")
    (common / "include" / "linux").mkdir(parents=True)
    (common / "include" / "linux" / "kconfig.h").write_text("/* kconfig */\n")
    os.chown(build, owner, owner)


def planted_headers(alice: Path) -> Path:
    tree = user_dirs(alice, ".cache", "gputop", "kernel-headers", HEADERS)
    (tree / "include" / "linux").mkdir(parents=True)
    (tree / "include" / "linux" / "kconfig.h").write_text("#define current alices_own\n")
    (tree / ".gputop-merged").write_text("planted\n")
    for p in tree.rglob("*"):
        as_nobody(p)
    return tree


def test_a_headers_tree_planted_in_a_users_cache_is_not_chosen(tmp_path: Path, alice: Path, root_cache: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: alice's tree, stamped as merged, was what bcc compiled root's program against."""
    headers_tree(tmp_path / "usr_src")
    planted_headers(alice)
    monkeypatch.setenv("XDG_CACHE_HOME", str(alice / ".cache"))
    c = kheaders.choose(RELEASE, usr_src=tmp_path / "usr_src", modules=tmp_path / "none")
    merged = root_cache / "gputop" / "kernel-headers" / HEADERS
    assert c.path == merged
    why = f"XDG_CACHE_HOME={alice}/.cache is not used as root: {alice} is owned by uid 65534"
    assert (c.kind, c.path, c.env, c.refused) == ("fallback", merged, {"BCC_KERNEL_SOURCE": str(merged)}, (why,))
    assert (merged / "include" / "linux" / "kconfig.h").read_text() == "/* kconfig */\n"
    assert c.detail == (f"no headers package for the running kernel {RELEASE}; using the distro's nearest, {HEADERS} "
                        f"({merged}) - fine for uprobes and tracepoints (not used: {why})")


def test_bcc_kernel_source_in_a_users_directory_is_refused(tmp_path: Path, alice: Path, root_cache: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: "BCC_KERNEL_SOURCE=~alice/... set by the user" (sudo -E keeps it) was compiled against."""
    headers_tree(tmp_path / "usr_src")
    (user_dirs(alice, "hdrs") / "include").mkdir()
    monkeypatch.setenv("BCC_KERNEL_SOURCE", str(alice / "hdrs"))
    why = f"BCC_KERNEL_SOURCE={alice}/hdrs: {alice} is owned by uid 65534"
    shown = kheaders.choose(RELEASE, usr_src=tmp_path / "usr_src", modules=tmp_path / "none", prepare=False)
    assert shown.path == tmp_path / "usr_src" / HEADERS         # the tree to merge (doctor: nothing prepared)
    assert shown.refused == (why,) and os.environ["BCC_KERNEL_SOURCE"] == str(alice / "hdrs")
    c = kheaders.choose(RELEASE, usr_src=tmp_path / "usr_src", modules=tmp_path / "none")
    assert c.kind == "fallback" and c.path == root_cache / "gputop" / "kernel-headers" / HEADERS
    assert c.refused == (why,) and "BCC_KERNEL_SOURCE" not in os.environ    # bcc reads it itself


def test_headers_trees_other_users_control_are_refused(tmp_path: Path, root_cache: Path) -> None:
    """Before: a linux-headers-* tree owned by another user was chosen."""
    headers_tree(tmp_path / "usr_src", owner=NOBODY)
    c = kheaders.choose(RELEASE, usr_src=tmp_path / "usr_src", modules=tmp_path / "none")
    assert c.path is None
    why = f"{tmp_path}/usr_src/{HEADERS}: {tmp_path}/usr_src/{HEADERS} is owned by uid 65534"
    assert (c.kind, c.path, c.refused) == ("missing", None, (why,))
    assert c.detail == f"no headers for {RELEASE} and none that gputop may use (not used: {why})"


def test_doctor_names_the_refused_headers_tree(tmp_path: Path, alice: Path, root_cache: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    from gputop.modes import doctor

    headers_tree(tmp_path / "usr_src")
    planted_headers(alice)
    monkeypatch.setattr(kheaders, "USR_SRC", tmp_path / "usr_src")
    monkeypatch.setattr(kheaders, "MODULES", tmp_path / "none")
    monkeypatch.setenv("XDG_CACHE_HOME", str(alice / ".cache"))
    check = doctor._headers()
    assert check.level == "WARN"
    assert check.detail.endswith(f"(not used: XDG_CACHE_HOME={alice}/.cache is not used as root: "
                                 f"{alice} is owned by uid 65534)")


def test_demo_builds_its_workload_outside_a_users_cache(tmp_path: Path, alice: Path, root_cache: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """`sudo -E gputop demo`: the workload root then runs is built in root's cache, never in the
    XDG_CACHE_HOME another user kept (where they could swap the program before it runs)."""
    from gputop.modes import demo

    planted = user_dirs(alice, ".cache")
    monkeypatch.setenv("XDG_CACHE_HOME", str(planted))
    exe = demo.build_workload()
    assert exe == root_cache / "gputop" / "demo" / "gputop-demo-workload" and exe.is_file()
    assert not (planted / "gputop").exists()


def test_demo_runs_only_a_python_no_other_user_can_change(tmp_path: Path, alice: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """`gputop demo` looks for PyTorch or CuPy beyond its own environment (a GPU host's python3 on PATH,
    a venv's `bin/python3` link): as root, never a python3 in, or resolving into, a directory another
    user controls; root's own venv link is used by its name (so that its venv is the one that loads)."""
    from gputop.modes import demo

    venv = tmp_path / "venv" / "bin"
    venv.mkdir(parents=True)
    (venv / "python3").symlink_to(sys.executable)
    user_bin = user_dirs(alice, "bin")
    (user_bin / "python3").symlink_to(sys.executable)
    as_nobody(user_bin / "python3")
    user_python = root_file(user_dirs(alice, "py") / "python3", b"#!/bin/sh\n", 0o755)   # root's file, their dir
    (tmp_path / "root-bin").mkdir()
    (tmp_path / "root-bin" / "python3").symlink_to(user_python)
    monkeypatch.delenv("GPUTOP_DEMO_PYTHON", raising=False)
    for path, expected in ((str(venv), [sys.executable, str(venv / "python3")]),
                           (str(user_bin), [sys.executable]),
                           (str(tmp_path / "root-bin"), [sys.executable])):
        monkeypatch.setenv("PATH", path)
        assert demo.interpreters() == expected, path
    assert safefiles.untrusted_program(user_bin / "python3") == f"{alice} is owned by uid {NOBODY}"
    assert safefiles.untrusted_program(tmp_path / "root-bin" / "python3") == f"{alice} is owned by uid {NOBODY}"
    assert safefiles.untrusted_program("python3") == "python3 is not an absolute path"
    monkeypatch.setenv("GPUTOP_DEMO_PYTHON", str(venv / "python3"))
    monkeypatch.setenv("PATH", str(user_bin))
    assert demo.interpreters() == [str(venv / "python3"), sys.executable]


def test_a_program_planted_on_path_is_passed_over(tmp_path: Path, alice: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`sudo -E gputop` with a PATH that starts in a user's directory: the c++filt (and the demo's gcc)
    planted there is not run as root; root's own, later on PATH, is."""
    import shutil

    from gputop.sources.bpf.attach import symbols

    marker = tmp_path / "pwned"
    planted = user_dirs(alice, "bin") / "c++filt"
    planted.write_text(f"#!/bin/sh\ntouch {marker}\n")
    planted.chmod(0o755)
    as_nobody(planted)
    real = shutil.which("c++filt")
    assert real is not None
    monkeypatch.setenv("PATH", f"{planted.parent}:{Path(real).parent}")
    symbols.cxxfilt_path.cache_clear()
    try:
        assert shutil.which("c++filt") == str(planted)          # what a plain lookup would have run
        assert safefiles.which("c++filt") == real
        assert symbols._cxxfilt("_Z3fooi") == "foo(int)"
    finally:
        symbols.cxxfilt_path.cache_clear()
    monkeypatch.setenv("PATH", str(planted.parent))
    assert safefiles.which("c++filt") is None
    assert not marker.exists()
    # what gputop's children get as root: the same PATH without the user's directory
    monkeypatch.setenv("PATH", f"{planted.parent}:{Path(real).parent}:relative/bin")
    assert safefiles.trusted_path() == str(Path(real).parent)


def test_a_root_link_into_a_users_directory_is_not_run(tmp_path: Path, alice: Path) -> None:
    """Each link on the way counts: root's link to a link in another user's directory is theirs to
    repoint, even when it points at root's program today."""
    hop = user_dirs(alice, "hop") / "python3"
    hop.symlink_to(sys.executable)
    as_nobody(hop)
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "python3").symlink_to(hop)
    assert safefiles.untrusted_program(tmp_path / "bin" / "python3") == f"{alice} is owned by uid {NOBODY}"
    assert safefiles.untrusted_program(sys.executable) is None


def test_a_link_target_is_read_from_where_the_kernel_resolves_it(tmp_path: Path) -> None:
    """A link `../python3` in a directory reached through a symbolic link leaves the real directory,
    not the path's text: here into a directory everyone can write to, whatever root's own file at
    the textual place says."""
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)                      # /tmp-like: anyone can put a python3 there
    rootbin = shared / "rootbin"
    rootbin.mkdir()
    (rootbin / "python3").symlink_to("../python3")
    (tmp_path / "opt").mkdir()
    (tmp_path / "opt" / "bin").symlink_to(rootbin)
    root_file(tmp_path / "opt" / "python3", b"#!/bin/sh\n", 0o755)    # what the path's text would reach
    root_file(shared / "python3", b"#!/bin/sh\n", 0o755)
    assert safefiles.untrusted_program(tmp_path / "opt" / "bin" / "python3") == (
        f"{shared} is writable by other users (mode 1777)")


def test_the_demos_probe_imports_nothing_of_a_users(tmp_path: Path, alice: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """`sudo gputop demo` in a user's directory, or with their PYTHONPATH: the Python that probes for
    CuPy and PyTorch as root runs isolated, in /, so their cupy.py is never imported."""
    from gputop.modes import demo

    marker = tmp_path / "imported"
    planted = user_dirs(alice, "work")
    for module in ("cupy", "torch"):
        (planted / f"{module}.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    monkeypatch.chdir(planted)
    monkeypatch.setenv("PYTHONPATH", str(planted))
    monkeypatch.setenv("PATH", str(Path(sys.executable).parent))
    monkeypatch.delenv("GPUTOP_DEMO_PYTHON", raising=False)
    assert demo._gpu_backend() is None
    assert not marker.exists()
    assert demo.python_args(sys.executable) == [sys.executable, "-I"]
    assert demo.child_env()["PATH"] == str(Path(sys.executable).parent)
