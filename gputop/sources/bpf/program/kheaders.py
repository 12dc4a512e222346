"""Choosing the kernel headers bcc compiles against.

bcc looks for ``/lib/modules/$(uname -r)/build``. When the distro has no headers package for the
running kernel (custom or cloud kernels), gputop falls back to the distro's newest installed
``linux-headers-*``: uprobe and tracepoint programs do not depend on kernel struct layouts, so
any recent headers compile them. Debian splits headers into an arch directory and a ``-common``
one that bcc only combines through ``/lib/modules/<release>/{build,source}``; for the fallback,
gputop merges both into a symlink tree in its cache and points bcc at it with
``BCC_KERNEL_SOURCE``. Nothing outside the cache is changed.

What is compiled into root's BPF program must be root's: a headers tree is used only when every
component of its path, from ``/`` down, is root's (or this user's) and writable by no one else
(``gputop.safefiles``), and the merged tree is made only in such a cache directory (as root, an
XDG_CACHE_HOME that another user controls is passed over). A tree refused, and why, is named in
the choice's ``detail`` (``gputop doctor`` shows it); an untrusted ``BCC_KERNEL_SOURCE`` is removed
from the environment when the headers are prepared (bcc reads it itself).
"""

from __future__ import annotations

import os
import platform
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from gputop import safefiles

MODULES = Path("/lib/modules")
USR_SRC = Path("/usr/src")


@dataclass(frozen=True)
class HeadersChoice:
    #: "exact", "fallback" or "missing"
    kind: str
    #: directory bcc compiles against (None when missing)
    path: Path | None
    #: one sentence for `gputop doctor` and the BPF source status
    detail: str
    #: environment for bcc (BCC_KERNEL_SOURCE) when the fallback is used
    env: dict[str, str]
    #: headers trees (or a cache directory) not used because another user controls them, and why
    refused: tuple[str, ...] = ()


def _cache_dir() -> tuple[Path, str | None]:
    home, note = safefiles.cache_home()
    return home / "gputop" / "kernel-headers", note


def _version_key(name: str) -> tuple[int, ...]:
    return tuple(int(n) for n in re.findall(r"\d+", name))


def _candidates(usr_src: Path, modules: Path) -> list[tuple[Path, Path | None]]:
    """(build dir, source dir or None) pairs of installed headers, newest first."""
    out: list[tuple[Path, Path | None]] = []
    seen: set[Path] = set()
    if modules.is_dir():
        for rel in modules.iterdir():
            build = rel / "build"
            if (build / "include").is_dir() or (build / "Makefile").is_file():
                src = rel / "source"
                out.append((build.resolve(), src.resolve() if src.is_dir() else None))
                seen.add(build.resolve())
    if usr_src.is_dir():
        for d in usr_src.glob("linux-headers-*"):
            if d.name.endswith("-common") or d.resolve() in seen or not (d / "Makefile").is_file():
                continue
            out.append((d.resolve(), _common_half(usr_src, d.name)))
    # prefer the machine's architecture flavour, then newest version
    arch = {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())
    out.sort(key=lambda bs: (arch in bs[0].name, "-rt-" not in bs[0].name, _version_key(bs[0].name)),
             reverse=True)
    return out


def _common_half(usr_src: Path, name: str) -> Path | None:
    """The ``-common`` half of Debian's split headers ``name``: the name with its flavour (the parts
    after the version: ``amd64``, ``cloud-amd64``, ``rt-amd64``) replaced by ``common``, whatever the
    version looks like (Debian 12: ``linux-headers-6.1.0-56-amd64``; Debian 13 and later:
    ``linux-headers-6.12.117+deb13-cloud-amd64``). None where there is none (Ubuntu's, or one tree)."""
    m = re.match(r"linux-headers-\d+\.\d+", name)
    if m is None:
        return None
    cut = len(name)
    while (cut := name.rfind("-", m.end(), cut)) != -1:
        common = usr_src / (name[:cut] + "-common")
        if common.is_dir():
            return common
    return None


def _merge(build: Path, source: Path | None, dest: Path) -> Path:
    """A symlink tree with ``source`` overlaid by ``build`` (cp -rs semantics), made once."""
    target = dest / build.name
    stamp = target / ".gputop-merged"
    if stamp.is_file():
        return target
    tmp = dest / (build.name + f".tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for tree in [t for t in (source, build) if t is not None]:
        for dirpath, dirnames, filenames in os.walk(tree, followlinks=False):
            rel = Path(dirpath).relative_to(tree)
            (tmp / rel).mkdir(exist_ok=True)
            for name in filenames + [d for d in dirnames if (Path(dirpath) / d).is_symlink()]:
                link = tmp / rel / name
                if link.is_symlink() or link.exists():
                    link.unlink()
                link.symlink_to(Path(dirpath) / name)
    (tmp / ".gputop-merged").write_text(f"{source}\n{build}\n")
    shutil.rmtree(target, ignore_errors=True)
    tmp.rename(target)
    return target


def _tree_refusal(build: Path, source: Path | None) -> str | None:
    """Why a headers tree (and its source half) may not be compiled into the program, or None."""
    for tree in (build, source):
        reason = safefiles.untrusted_reason(tree) if tree is not None else None
        if reason:
            return f"{tree}: {reason}"
    return None


def _env_refusal(prepare: bool) -> str | None:
    """Why BCC_KERNEL_SOURCE may not be used (None: unset or trusted); with ``prepare`` an untrusted
    one is removed from the environment, since bcc reads it itself."""
    env_src = os.environ.get("BCC_KERNEL_SOURCE")
    reason = safefiles.untrusted_reason(env_src) if env_src else None
    if reason is None:
        return None
    if prepare:
        os.environ.pop("BCC_KERNEL_SOURCE", None)
    return f"BCC_KERNEL_SOURCE={env_src}: {reason}"


def _merge_dir(cache: Path | None, refused: list[str], create: bool) -> Path | None:
    """The directory to merge split headers in (made when ``create``), when it is trusted (else
    None, and why in ``refused``)."""
    note = None
    if cache is None:
        cache, note = _cache_dir()
    if note:
        refused.append(note)
    if not create:
        reason = safefiles.untrusted_reason(cache, missing_ok=True)
    else:
        try:
            os.close(safefiles.open_dir(cache, create=True, mode=0o755))
            reason = None
        except OSError as e:
            reason = str(e) if isinstance(e, safefiles.UnsafePathError) else f"{e.strerror or e}"
    if reason:
        refused.append(f"cache {cache}: {reason}")
        return None
    return cache


def _with_refusals(choice: HeadersChoice, refused: list[str]) -> HeadersChoice:
    if not refused:
        return choice
    return HeadersChoice(choice.kind, choice.path, f"{choice.detail} (not used: {'; '.join(refused)})", choice.env,
                         tuple(refused))


def choose(release: str | None = None, *, usr_src: Path | None = None, modules: Path | None = None,
           cache: Path | None = None, prepare: bool = True) -> HeadersChoice:
    """Pick the headers for ``release`` (default: the running kernel), only among trees no other
    user controls (each refusal is named in ``detail`` and ``refused``).

    With ``prepare``, the fallback's merged tree is built in the cache (about a second, once), and
    an untrusted BCC_KERNEL_SOURCE is removed from the environment.
    """
    release = release or platform.release()
    usr_src = usr_src or USR_SRC
    modules = modules or MODULES
    env_refusal = _env_refusal(prepare)
    refused = [env_refusal] if env_refusal else []
    env_src = None if env_refusal else os.environ.get("BCC_KERNEL_SOURCE")
    return _with_refusals(_choose(release, env_src, usr_src, modules, cache, prepare, refused), refused)


def _choose(release: str, env_src: str | None, usr_src: Path, modules: Path, cache: Path | None, prepare: bool,
            refused: list[str]) -> HeadersChoice:
    exact = modules / release / "build"
    if (exact / "include").is_dir():
        exact_source = modules / release / "source"
        reason = _tree_refusal(exact, exact_source if exact_source.is_dir() else None)
        if reason is None:
            return HeadersChoice("exact", exact, f"exact headers for {release} in {exact.resolve()}", {})
        refused.append(reason)
    if env_src:
        return HeadersChoice("fallback", Path(env_src), f"BCC_KERNEL_SOURCE={env_src} set by the user",
                             {"BCC_KERNEL_SOURCE": env_src})
    cands = []
    for build, source in _candidates(usr_src, modules):
        reason = _tree_refusal(build, source)
        if reason is None:
            cands.append((build, source))
        elif reason not in refused:
            refused.append(reason)
    if not cands:
        what = "none that gputop may use" if refused else "no linux-headers-* installed"
        return HeadersChoice("missing", None, f"no headers for {release} and {what}", {})
    build, source = cands[0]
    path = build
    if source is not None:
        dest = _merge_dir(cache, refused, create=prepare)
        if prepare and dest is not None:
            path = _merge(build, source, dest)
    detail = (f"no headers package for the running kernel {release}; using the distro's nearest, "
              f"{build.name} ({path}) - fine for uprobes and tracepoints")
    return HeadersChoice("fallback", path, detail, {"BCC_KERNEL_SOURCE": str(path)})
