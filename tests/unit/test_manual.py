"""The command line as users of argparse tools expect it (issue 38, item 5): the subcommands in gputop's own
parser (its --help lists them, each has its own --help), completion scripts for bash, zsh and fish run in
the real shells, and a man page that groff renders without a warning; all generated from the parser, so
every option of every command is in each."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support import ROOT

from gputop.modes.commands import COMMANDS, full_parser
from gputop.modes.manual import _commands, _options

GPUTOP = [sys.executable, "-m", "gputop"]


def gputop(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*GPUTOP, *args], capture_output=True, text=True, cwd=ROOT, timeout=60)


def every_option() -> dict[str, set[str]]:
    """command ("" for gputop itself) -> its option strings, from the parser."""
    p = full_parser()
    out = {"": {s for a in _options(p) for s in a.option_strings}}
    for name, (_, sub) in _commands(p).items():
        out[name] = {s for a in _options(sub) for s in a.option_strings}
    return out


def test_help_lists_each_command_and_each_has_its_own_help() -> None:
    res = gputop("--help")
    assert res.returncode == 0
    listed = re.findall(r"^    (\w+) {2,}(.+)$", res.stdout.split("\ncommands:\n", 1)[1], re.M)
    assert [name for name, _ in listed] == list(COMMANDS) == ["doctor", "exporter", "demo"]
    for name in COMMANDS:
        own = gputop(name, "--help")
        assert own.returncode == 0 and own.stdout.startswith(f"usage: gputop {name} "), own.stdout[:200]
    assert "--web.config.file" in gputop("exporter", "--help").stdout
    assert "--selftest" in gputop("doctor", "--help").stdout


def test_a_command_after_gputops_own_options_is_refused() -> None:
    res = gputop("-b", "exporter")
    assert (res.returncode, res.stdout) == (2, "")
    assert res.stderr == ("gputop: error: options before the command 'exporter' are gputop's, not its own\n"
                          "hint: put the command first: gputop exporter [OPTIONS]\n")


def _bash(script: str, *words: str) -> list[str]:
    """What bash's completion offers for ``words`` (the last being completed) with ``script`` sourced."""
    quoted = " ".join("'" + w.replace("'", "'\\''") + "'" for w in words)
    cmd = (f"source {script}; COMP_WORDS=({quoted}); COMP_CWORD=$(( ${{#COMP_WORDS[@]}} - 1 )); COMPREPLY=(); "
           "_gputop; printf '%s\\n' \"${COMPREPLY[@]}\"")
    res = subprocess.run(["bash", "--norc", "-c", cmd], capture_output=True, text=True, timeout=30)
    assert res.returncode == 0, res.stderr
    return [w for w in res.stdout.splitlines() if w]


@pytest.fixture(scope="module")
def scripts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("completion")
    out = {}
    for shell, name in (("bash", "gputop.bash"), ("fish", "gputop.fish"), ("zsh", "_gputop")):
        res = gputop("--print-completion", shell)
        assert res.returncode == 0 and res.stderr == ""
        (d / name).write_text(res.stdout)
        out[shell] = d / name
    return out


def test_bash_completes_options_commands_and_values(scripts: dict[str, Path]) -> None:
    s = str(scripts["bash"])
    assert _bash(s, "gputop", "--rec") == ["--record", "--record-max-size", "--record-keep"]
    assert _bash(s, "gputop", "exporter", "--web") == ["--web.listen-address", "--web.config.file"]
    assert _bash(s, "gputop", "exporter", "--aggregate", "") == ["process", "container"]
    assert _bash(s, "gputop", "-f", "") == ["json", "table"]
    assert _bash(s, "gputop", "-s", "la") == ["launches", "launch_bound"]
    assert _bash(s, "gputop", "--theme", "") == ["dark", "light", "high-contrast", "monochrome"]
    assert _bash(s, "gputop", "doctor", "--") == ["--help", "--selftest", "--cudart"]
    assert _bash(s, "gputop", "-d", "") == []                       # a number: nothing to offer
    assert _bash(s, "gputop", "d") == ["doctor", "demo"]            # commands come first
    assert _bash(s, "gputop", "-b", "d") == []
    for command, options in every_option().items():
        offered = set(_bash(s, "gputop", *([command] if command else []), "-"))
        assert offered == options, command


def _fish(script: Path, line: str) -> list[str]:
    res = subprocess.run(["fish", "--no-config", "-c", f"source {script}; complete -C {line!r}"],
                         capture_output=True, text=True, timeout=30)
    assert res.returncode == 0, res.stderr
    return [w.split("\t")[0] for w in res.stdout.splitlines()]


@pytest.mark.skipif(shutil.which("fish") is None, reason="fish not installed (./test.sh's set-up installs it)")
def test_fish_completes_options_commands_and_values(scripts: dict[str, Path]) -> None:
    f = scripts["fish"]
    assert _fish(f, "gputop exporter --web") == ["--web.config.file", "--web.listen-address"]
    assert _fish(f, "gputop ") == ["demo", "doctor", "exporter"]
    assert _fish(f, "gputop -f ") == ["json", "table"]
    assert _fish(f, "gputop exporter --buckets ") == ["log2", "log16", "none"]
    assert _fish(f, "gputop doctor --") == ["--cudart", "--help", "--selftest"]
    for command, options in every_option().items():
        longs = {o for o in options if o.startswith("--")}
        offered = set(_fish(f, f"gputop {command} --".replace("  ", " ")))
        assert offered == longs, command


#: drives an interactive zsh in a pseudo-terminal (zpty): compinit with the script's directory on fpath,
#: compadd wrapped to print what it is given between << and >>, then the line and a TAB
_ZSH = r"""
zmodload zsh/zpty
zpty z zsh -f -i
zpty -w z "PROMPT='> '"
zpty -w z "fpath=($2 \$fpath); autoload -U compinit; compinit -u -D"
zpty -w z 'compadd () {
    if [[ ${@[1,(i)(-|--)]} == *-(O|A|D)\ * ]]; then builtin compadd "$@"; return $?; fi
    typeset -a __hits; builtin compadd -A __hits "$@"; (( $#__hits )) || return
    print -l -- "<<" $__hits ">>"; builtin compadd "$@"
}'
zpty -w z "print -- re''ady"
zpty -r z line '*ready*'
zpty -w -n z "$1"$'\t'
out=""
integer i quiet
for (( i = 0; i < 100 && quiet < 5; i++ )); do
    sleep 0.1
    if zpty -r -t z chunk; then
        out+=$chunk
        while zpty -r -t z chunk; do out+=$chunk; done
        quiet=0
    elif [[ $out == *'>>'* ]]; then
        (( quiet++ ))
    fi
done
print -r -- "$out"
zpty -d z
"""


def _zsh(script: Path, line: str) -> list[str]:
    driver = script.parent / "capture.zsh"
    driver.write_text(_ZSH)
    res = subprocess.run(["zsh", "-f", str(driver), line, str(script.parent)], capture_output=True, text=True,
                         timeout=60)
    assert res.returncode == 0, res.stderr
    text = res.stdout.replace("\r", "")
    words: list[str] = []
    for block in re.findall(r"<<\n(.*?)\n>>", text, re.S):
        words += block.split("\n")
    return sorted(set(words))


@pytest.mark.skipif(shutil.which("zsh") is None, reason="zsh not installed (./test.sh's set-up installs it)")
def test_zsh_completes_options_commands_and_values(scripts: dict[str, Path]) -> None:
    z = scripts["zsh"]
    assert _zsh(z, "gputop -f ") == ["json", "table"]
    assert _zsh(z, "gputop exporter --web") == ["--web.config.file", "--web.listen-address"]
    assert _zsh(z, "gputop exporter --aggregate ") == ["container", "process"]
    assert _zsh(z, "gputop d") == ["demo", "doctor"]
    assert _zsh(z, "gputop doctor --") == ["--cudart", "--help", "--selftest"]
    longs = {o for o in every_option()["exporter"] if o.startswith("--")}
    assert set(_zsh(z, "gputop exporter --")) == longs


def test_the_man_page_renders_without_a_warning_and_lists_every_option(tmp_path: Path) -> None:
    res = gputop("--print-man")
    assert res.returncode == 0 and res.stderr == ""
    page = tmp_path / "gputop.1"
    page.write_text(res.stdout)
    shown = subprocess.run(["groff", "-man", "-Tutf8", "-ww", "-rLL=200n", str(page)], capture_output=True,
                           timeout=60)
    assert shown.returncode == 0 and shown.stderr == b"", shown.stderr
    text = re.sub(r".\x08", "", shown.stdout.decode()).replace("\u2010", "-").replace("\u2212", "-")
    assert text.startswith("GPUTOP(1)")
    for heading in ("NAME", "SYNOPSIS", "DESCRIPTION", "OPTIONS", "COMMANDS", "EXIT STATUS", "SEE ALSO"):
        assert re.search(rf"^{heading}$", text, re.M), heading
    for command, options in every_option().items():
        if command:
            assert f"gputop {command}" in text
        for option in options:
            assert re.search(rf"(^|[ ,]){re.escape(option)}\b", text), (command, option)
