"""What gputop's parser says, written for shells and for man: the completion scripts of bash, zsh and fish
(``completion``) and a roff man page (``man_page``), each generated from the parser with its subcommands
(gputop.modes.commands.full_parser), so that a new option is completed and documented where it is added.

An option's value is completed from its ``choices``, from ``VALUES`` (the sort columns), as a file where its
metavar is FILE or PATH, and otherwise left to the user (a number, an address)."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterator

from gputop import __version__

#: file-valued options are known by their metavar
_FILE_METAVARS = frozenset({"FILE", "PATH"})


def _values() -> dict[str, tuple[str, ...]]:
    """Values of options whose parser validates them later (no ``choices``): the sort columns, the themes
    (the built-in ones and this user's, as they are when the script is printed)."""
    from gputop.ui.themes import theme_names
    from gputop.view.columns import SORT_KEYS

    return {"--sort": SORT_KEYS, "--theme": theme_names()}


def _options(p: argparse.ArgumentParser) -> list[argparse.Action]:
    return [a for a in p._actions if a.option_strings and a.help != argparse.SUPPRESS]


def _commands(p: argparse.ArgumentParser) -> dict[str, tuple[str, argparse.ArgumentParser]]:
    """name -> (its one line, its parser), in the parser's order."""
    out: dict[str, tuple[str, argparse.ArgumentParser]] = {}
    for a in p._actions:
        if isinstance(a, argparse._SubParsersAction):
            helps = {c.dest: c.help or "" for c in a._choices_actions}
            out.update((name, (helps.get(name, ""), sub)) for name, sub in a.choices.items())
    return out


def _help(p: argparse.ArgumentParser, a: argparse.Action) -> str:
    """The option's help as --help prints it (argparse's ``%(default)s`` and ``%%`` expanded)."""
    text = a.help or ""
    try:
        return text % {**vars(a), "prog": p.prog}
    except (KeyError, TypeError, ValueError):
        return text


def _short(text: str, most: int = 100) -> str:
    """The help on one line, cut to ``most`` characters (a shell's description column)."""
    one = " ".join(text.split())
    return one if len(one) <= most else one[:most - 1].rstrip() + "…"


def _takes_value(a: argparse.Action) -> bool:
    return a.nargs != 0


def _value_words(a: argparse.Action, values: dict[str, tuple[str, ...]]) -> tuple[str, ...] | None:
    if a.choices is not None:
        return tuple(str(c) for c in a.choices)
    for s in a.option_strings:
        if s in values:
            return values[s]
    return None


def _is_file(a: argparse.Action) -> bool:
    return str(a.metavar or "") in _FILE_METAVARS


# ------------------------------------------------------------------------------------------------- bash

def _bash(p: argparse.ArgumentParser) -> str:
    values = _values()
    commands = _commands(p)
    parsers = {"": p, **{name: sub for name, (_, sub) in commands.items()}}
    lines = ["# bash completion for gputop (gputop --print-completion bash)", "_gputop() {",
             '    local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]} cmd=""',
             '    # a command comes first (gputop refuses one after its own options)',
             f'    if (( COMP_CWORD > 1 )); then case ${{COMP_WORDS[1]}} in {"|".join(commands)}) '
             'cmd=${COMP_WORDS[1]};; esac; fi',
             '    case "$cmd $prev" in']
    for name, sub in parsers.items():
        for a in _options(sub):
            if not _takes_value(a):
                continue
            pattern = "|".join(f'"{name} {s}"' for s in a.option_strings)
            words = _value_words(a, values)
            if words is not None:
                reply = f'COMPREPLY=($(compgen -W "{" ".join(words)}" -- "$cur"))'
            elif _is_file(a):
                reply = 'compopt -o filenames 2>/dev/null; COMPREPLY=($(compgen -f -- "$cur"))'
            else:
                reply = "COMPREPLY=()"
            lines.append(f"        {pattern}) {reply}; return;;")
    lines += ["    esac", '    case $cmd in']
    for name, sub in parsers.items():
        flags = [s for a in _options(sub) for s in a.option_strings]
        first = " ".join(commands) if name == "" else ""
        lines.append(f'        "{name}") COMPREPLY=($(compgen -W "{" ".join(flags)}" -- "$cur"))')
        if first:
            lines.append(f'            (( COMP_CWORD == 1 )) && COMPREPLY+=($(compgen -W "{first}" -- "$cur"));;')
        else:
            lines[-1] += ";;"
    lines += ["    esac", "}", "complete -F _gputop gputop", ""]
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------------- zsh

def _zsh_text(text: str) -> str:
    """Help text inside a single-quoted _arguments spec: its brackets and colons escaped."""
    return (_short(text).replace("\\", "\\\\").replace("'", "'\\''").replace("[", "(").replace("]", ")")
            .replace(":", "\\:"))


def _zsh_specs(p: argparse.ArgumentParser, values: dict[str, tuple[str, ...]]) -> Iterator[str]:
    for a in _options(p):
        help_ = _zsh_text(_help(p, a))
        strings = a.option_strings
        excl = f"({' '.join(strings)})" if len(strings) > 1 else ""
        if not _takes_value(a):
            names = "{" + ",".join(strings) + "}" if len(strings) > 1 else strings[0]
            yield f"'{excl}'{names}'[{help_}]'" if excl else f"'{names}[{help_}]'"
            continue
        meta = str(a.metavar or a.dest.upper()).replace(":", "\\:").replace("[", "(").replace("]", ")")
        words = _value_words(a, values)
        action = f"({' '.join(words)})" if words is not None else "_files" if _is_file(a) else " "
        forms = [f"{s}+" if len(s) == 2 else f"{s}=" for s in strings]
        names = "{" + ",".join(forms) + "}" if len(forms) > 1 else forms[0]
        if excl:
            yield f"'{excl}'{names}'[{help_}]:{meta}:{action}'"
        else:
            yield f"'{names}[{help_}]:{meta}:{action}'"


def _zsh(p: argparse.ArgumentParser) -> str:
    values = _values()
    commands = _commands(p)
    lines = ["#compdef gputop", "# zsh completion for gputop (gputop --print-completion zsh)", ""]
    for name, (_, sub) in commands.items():
        lines += [f"_gputop_{name}() {{", "    _arguments -s -S : \\"]
        lines += [f"        {spec} \\" for spec in _zsh_specs(sub, values)]
        lines[-1] = lines[-1].rstrip(" \\")
        lines += ["}", ""]
    described = " ".join(f'{name}\\:"{_zsh_text(summary)}"' for name, (summary, _) in commands.items())
    lines += ["_gputop() {",
              "    # a command comes first (gputop refuses one after its own options): its own options then",
              f"    if (( CURRENT > 2 )) && [[ ${{words[2]}} == ({'|'.join(commands)}) ]]; then",
              "        local cmd=${words[2]}",
              "        shift words",
              "        (( CURRENT-- ))",
              "        _gputop_$cmd",
              "        return",
              "    fi",
              "    _arguments -s -S : \\"]
    lines += [f"        {spec} \\" for spec in _zsh_specs(p, values)]
    lines += [f"        '1:command:(({described}))'", "}", "", '_gputop "$@"', ""]
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------------- fish

def _fish_text(text: str) -> str:
    return _short(text).replace("\\", "\\\\").replace("'", "\\'")


def _fish(p: argparse.ArgumentParser) -> str:
    values = _values()
    commands = _commands(p)
    names = " ".join(commands)
    lines = ["# fish completion for gputop (gputop --print-completion fish)", "complete -c gputop -f"]
    for name, (summary, _) in commands.items():
        lines.append(f"complete -c gputop -n 'test (count (commandline -opc)) -eq 1' -a {name} "
                     f"-d '{_fish_text(summary)}'")
    parsers = {"": p, **{name: sub for name, (_, sub) in commands.items()}}
    for name, sub in parsers.items():
        cond = f"not __fish_seen_subcommand_from {names}" if name == "" else \
            f"__fish_seen_subcommand_from {name}"
        for a in _options(sub):
            parts = [f"complete -c gputop -n '{cond}'"]
            for s in a.option_strings:
                parts.append(f"-s {s[1:]}" if len(s) == 2 else f"-l {s[2:]}")
            if _takes_value(a):
                words = _value_words(a, values)
                if words is not None:
                    parts.append(f"-x -a '{' '.join(words)}'")
                elif _is_file(a):
                    parts.append("-r -F")
                else:
                    parts.append("-x")
            parts.append(f"-d '{_fish_text(_help(sub, a))}'")
            lines.append(" ".join(parts))
    return "\n".join(lines) + "\n"


_SHELLS: dict[str, Callable[[argparse.ArgumentParser], str]] = {"bash": _bash, "zsh": _zsh, "fish": _fish}


def completion(parser: argparse.ArgumentParser, shell: str) -> str:
    """The completion script of ``shell`` (bash, zsh, fish) for ``parser`` and its subcommands."""
    return _SHELLS[shell](parser)


# ------------------------------------------------------------------------------------------------- man

def _roff(text: str) -> str:
    """Text for a roff line: backslashes and hyphens escaped, no line starting as a request."""
    out = text.replace("\\", "\\e").replace("-", "\\-")
    return "\\&" + out if out.startswith((".", "'")) else out


def _man_options(p: argparse.ArgumentParser) -> list[str]:
    lines: list[str] = []
    for a in _options(p):
        forms = []
        for s in a.option_strings:
            form = f"\\fB{_roff(s)}\\fR"
            if _takes_value(a):
                form += f" \\fI{_roff(str(a.metavar or a.dest.upper()))}\\fR"
            forms.append(form)
        lines += [".TP", ", ".join(forms), _roff(_help(p, a))]
        if a.choices is not None:
            lines.append(_roff(f"One of: {', '.join(str(c) for c in a.choices)}."))
    return lines


def man_page(parser: argparse.ArgumentParser) -> str:
    """gputop(1) in roff (man's -man macros): synopsis, options, each command and its options, exit status."""
    commands = _commands(parser)
    lines = [f'.TH GPUTOP 1 "" "gputop {__version__}" "User Commands"', ".SH NAME",
             "gputop \\- a top for CUDA processes, traced with eBPF", ".SH SYNOPSIS",
             ".B gputop", "[\\fIOPTIONS\\fR]"]
    for name in commands:
        lines += [".br", ".B gputop", f".B {name}", "[\\fIOPTIONS\\fR]"]
    lines += [".SH DESCRIPTION", _roff(parser.description or ""), ".SH OPTIONS", *_man_options(parser),
              ".SH COMMANDS"]
    for name, (summary, sub) in commands.items():
        lines += [f'.SS "gputop {name}"', _roff(sub.description or summary), *_man_options(sub)]
        if sub.epilog:
            lines += [".PP", _roff(sub.epilog)]
    lines += [".SH EXIT STATUS", ".TP", "0", "success", ".TP", "1", "an error (one \\fBgputop: error:\\fR line "
              "and a \\fBhint:\\fR line on standard error)", ".TP", "2", "bad usage", ".TP", "77",
              "the privileges to trace are missing where \\fB\\-\\-bpf\\fR asked for tracing",
              ".SH SEE ALSO", "\\fBtop\\fR(1), \\fBhtop\\fR(1), \\fBnvidia\\-smi\\fR(1), \\fBbpftrace\\fR(8); "
              "the project's README and docs/", ""]
    return "\n".join(lines)
