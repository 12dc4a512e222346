"""Choosing the kernel headers bcc compiles against.

bcc looks for ``/lib/modules/$(uname -r)/build``. When the distro has no headers package for the
running kernel (custom or cloud kernels), gputop falls back to the distro's newest installed
``linux-headers-*``: uprobe and tracepoint programs do not depend on kernel struct layouts, so
any recent headers compile them. Debian splits headers into an arch directory and a ``-common``
one that bcc only combines through ``/lib/modules/<release>/{build,source}``; for the fallback,
gputop merges both into a symlink tree in its cache and points bcc at it with
``BCC_KERNEL_SOURCE``. Nothing outside the cache is changed.
"""

from __future__ import annotations

import os
import platform
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

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


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or ("/var/cache" if os.geteuid() == 0 else "~/.cache")
    return Path(base).expanduser() / "gputop" / "kernel-headers"


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
            common = None
            m = re.match(r"(linux-headers-\d+\.\d+\.\d+-\d+)-", d.name)
            if m and (usr_src / (m.group(1) + "-common")).is_dir():
                common = usr_src / (m.group(1) + "-common")
            out.append((d.resolve(), common))
    # prefer the machine's architecture flavour, then newest version
    arch = {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())
    out.sort(key=lambda bs: (arch in bs[0].name, "-rt-" not in bs[0].name, _version_key(bs[0].name)),
             reverse=True)
    return out


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


def choose(release: str | None = None, *, usr_src: Path = USR_SRC, modules: Path = MODULES,
           cache: Path | None = None, prepare: bool = True) -> HeadersChoice:
    """Pick the headers for ``release`` (default: the running kernel).

    With ``prepare``, the fallback's merged tree is built in the cache (about a second, once).
    """
    release = release or platform.release()
    exact = modules / release / "build"
    if (exact / "include").is_dir():
        return HeadersChoice("exact", exact, f"exact headers for {release} in {exact.resolve()}", {})
    env_src = os.environ.get("BCC_KERNEL_SOURCE")
    if env_src:
        return HeadersChoice("fallback", Path(env_src), f"BCC_KERNEL_SOURCE={env_src} set by the user",
                             {"BCC_KERNEL_SOURCE": env_src})
    cands = _candidates(usr_src, modules)
    if not cands:
        return HeadersChoice("missing", None,
                             f"no headers for {release} and no linux-headers-* installed", {})
    build, source = cands[0]
    path = _merge(build, source, cache or _cache_dir()) if prepare and source is not None else build
    detail = (f"no headers package for the running kernel {release}; using the distro's nearest, "
              f"{build.name} ({path}) - fine for uprobes and tracepoints")
    return HeadersChoice("fallback", path, detail, {"BCC_KERNEL_SOURCE": str(path)})
