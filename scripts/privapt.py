#!/usr/bin/env python3
"""apt with a private state over the machine's own mirrors (stdlib only).

The test bed (scripts/testbed.sh) and the offline bundle (scripts/offline-bundle.sh) fetch Debian or
Ubuntu packages without touching the machine's package lists, its dpkg database or its sources:

* the mirrors come from the machine's own apt configuration (``sources.list``, ``sources.list.d/*.list``
  and deb822 ``*.sources``; only enabled files and entries), restricted to the host's own release
  (``VERSION_CODENAME`` and its ``-updates`` and ``-security`` pockets), with their options (``signed-by``
  keyrings) kept and, on request, one more component (``non-free`` on Debian, ``restricted`` on Ubuntu:
  where the NVIDIA driver libraries live);
* apt runs with a private ``Dir::State::Lists``, archives folder, sources and an empty dpkg status (so
  dependency closures are those of a bare host, whatever is installed here);
* packages are downloaded with ``apt-get download`` (checked against the signed indexes) and unpacked
  with ``dpkg -x``.

Commands:
  privapt.py sources [--nvidia]          print the private sources (deb822) this machine yields
  privapt.py nvidia-libs STATE DEST      libcuda.so.1 + libnvidia-ml.so.1 into DEST (the test bed)
  privapt.py bundle STATE DEST [--kernel RELEASE]... [--headers-meta PKG]
                                          bcc's and binutils' packages and fallback kernel headers into DEST/debs and
                                          DEST/headers, their list in DEST/debs.json (the offline bundle)
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import urllib.parse
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

ETC_APT = Path("/etc/apt")
OS_RELEASE = Path("/etc/os-release")

#: the packages gputop needs from the distro: python3-bpfcc (with libbpfcc, LLVM, clang and python3) and
#: binutils (c++filt demangles kernel names)
BUNDLE_PACKAGES = ("python3-bpfcc", "binutils")
#: the Debian packages holding libcuda.so.1 and libnvidia-ml.so.1 (component non-free)
DEBIAN_NVIDIA = ("libcuda1", "libnvidia-ml1")
#: pockets of a release that belong to it (its fixes), beside the release itself; never -backports/-proposed.
#: The offline bundle takes them all (security fixes of what it carries); the test bed only the release
#: itself, so that its NVIDIA libraries stay the ones the tests were written against until a point release.
OWN_POCKETS = ("", "-updates", "-security")
RELEASE_ONLY = ("",)

#: one-line option names -> deb822 field names (sources.list(5))
_OPTION_FIELDS = {
    "arch": "Architectures", "lang": "Languages", "target": "Targets", "pdiffs": "PDiffs",
    "by-hash": "By-Hash", "allow-insecure": "Allow-Insecure", "allow-weak": "Allow-Weak",
    "allow-downgrade-to-insecure": "Allow-Downgrade-To-Insecure", "trusted": "Trusted",
    "signed-by": "Signed-By", "check-valid-until": "Check-Valid-Until", "valid-until-min": "Valid-Until-Min",
    "valid-until-max": "Valid-Until-Max", "check-date": "Check-Date", "date-max-future": "Date-Max-Future",
    "inrelease-path": "InRelease-Path", "snapshot": "Snapshot",
}
#: deb822 fields that are not options of an entry
_ENTRY_FIELDS = {"types", "uris", "suites", "components", "enabled"}


class PrivAptError(Exception):
    """A problem a person can fix; the message says what, the hint how."""

    def __init__(self, message: str, hint: str) -> None:
        super().__init__(message)
        self.hint = hint


# ------------------------------------------------------------------ sources


@dataclass(frozen=True)
class Source:
    """One (type, URI, suite) entry of apt's sources with its components and options."""
    type: str                                   # "deb" or "deb-src"
    uri: str
    suite: str
    components: tuple[str, ...]
    options: tuple[tuple[str, str], ...] = ()   # deb822 field name -> value (lists space-separated)
    origin: str = ""                            # the file it came from

    def option(self, name: str) -> str | None:
        for key, value in self.options:
            if key.lower() == name.lower():
                return value
        return None


def _one_line_options(text: str) -> tuple[tuple[str, str], ...]:
    out: list[tuple[str, str]] = []
    for item in text.split():
        key, sep, value = item.partition("=")
        if not sep:
            continue
        suffix = ""
        if key.endswith(("+", "-")):
            suffix = "-Add" if key.endswith("+") else "-Remove"
            key = key[:-1]
        name = _OPTION_FIELDS.get(key.lower(), key.title()) + suffix
        out.append((name, " ".join(v for v in value.split(",") if v)))
    return tuple(out)


def parse_one_line(text: str, origin: str = "") -> list[Source]:
    """Entries of a one-line ``sources.list`` text (``deb [opts] uri suite [component...]``)."""
    out: list[Source] = []
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        # a CD-ROM's URI holds its label in brackets, spaces included
        m = re.match(r"^(deb|deb-src)\s+(?:\[([^\]]*)\]\s+)?(cdrom:\[[^\]]*\]\S*|\S+)\s+(\S+)\s*(.*)$", line)
        if m is None:
            continue
        kind, opts, uri, suite, comps = m.groups()
        out.append(Source(kind, uri, suite, tuple(comps.split()), _one_line_options(opts or ""), origin))
    return out


@dataclass
class _Stanza:
    fields: dict[str, str] = field(default_factory=dict)     # lower-case name -> value
    names: dict[str, str] = field(default_factory=dict)      # lower-case name -> name as written


def _deb822_stanzas(text: str) -> list[_Stanza]:
    """Paragraphs of a deb822 text; continuation lines joined with newlines, comment lines dropped."""
    stanzas: list[_Stanza] = []
    cur = _Stanza()
    last: str | None = None
    for line in [*text.splitlines(), ""]:
        if line.startswith("#"):
            continue
        if not line.strip():
            if cur.fields:
                stanzas.append(cur)
            cur, last = _Stanza(), None
        elif line[0] in " \t":
            if last is not None:
                cur.fields[last] += "\n" + line.strip()
        else:
            key, sep, value = line.partition(":")
            if sep:
                last = key.strip().lower()
                cur.names[last] = key.strip()
                cur.fields[last] = value.strip()
    return stanzas


def parse_deb822(text: str, origin: str = "") -> list[Source]:
    """Entries of a deb822 ``*.sources`` text; stanzas with ``Enabled: no`` are left out."""
    out: list[Source] = []
    for st in _deb822_stanzas(text):
        f = st.fields
        if f.get("enabled", "yes").strip().lower() in ("no", "false", "0"):
            continue
        options = tuple((st.names[k], v) for k, v in f.items() if k not in _ENTRY_FIELDS)
        comps = tuple(f.get("components", "").split())
        for kind in f.get("types", "").split():
            for uri in f.get("uris", "").split():
                for suite in f.get("suites", "").split():
                    out.append(Source(kind, uri, suite, comps, options, origin))
    return out


def source_files(etc: Path = ETC_APT) -> list[Path]:
    """The files apt reads: sources.list, then sources.list.d/*.list and *.sources (other names, such as
    ``.list.disabled`` or ``.save``, are ignored by apt and here)."""
    files = [etc / "sources.list"] if (etc / "sources.list").is_file() else []
    parts = etc / "sources.list.d"
    if parts.is_dir():
        files += sorted(p for p in parts.iterdir()
                        if p.is_file() and re.fullmatch(r"[A-Za-z0-9_.-]+\.(list|sources)", p.name))
    return files


def read_sources(etc: Path = ETC_APT) -> list[Source]:
    out: list[Source] = []
    for path in source_files(etc):
        text = path.read_text(errors="replace")
        out += parse_deb822(text, str(path)) if path.suffix == ".sources" else parse_one_line(text, str(path))
    return out


@dataclass(frozen=True)
class Release:
    family: str                 # "debian" or "ubuntu"
    codenames: tuple[str, ...]  # VERSION_CODENAME (and UBUNTU_CODENAME on Ubuntu derivatives)
    pretty: str


def parse_os_release(text: str) -> Release:
    fields: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            fields[key.strip()] = value.strip().strip("'\"")
    ids = [fields.get("ID", ""), *fields.get("ID_LIKE", "").split()]
    pretty = fields.get("PRETTY_NAME", fields.get("ID", "this system"))
    if "ubuntu" in ids:
        family = "ubuntu"
    elif "debian" in ids:
        family = "debian"
    else:
        raise PrivAptError(f"{pretty} is neither Debian nor Ubuntu", "run this on a Debian or Ubuntu machine")
    names = [fields.get("VERSION_CODENAME", "")]
    if family == "ubuntu":
        names.append(fields.get("UBUNTU_CODENAME", ""))
    codenames = tuple(dict.fromkeys(n for n in names if n))
    if not codenames:
        raise PrivAptError(f"{pretty} names no release codename (VERSION_CODENAME in /etc/os-release)",
                           "run this on a released Debian or Ubuntu version")
    return Release(family, codenames, pretty)


def own_release(sources: Iterable[Source], release: Release, pockets: Sequence[str] = OWN_POCKETS) -> list[Source]:
    """Binary entries of the host's own release (suite == codename, or codename + one of ``pockets``),
    merged per (URI, suite, options); CD-ROMs (which a private state cannot mount) are left out."""
    suites = {c + p for c in release.codenames for p in pockets}
    merged: dict[tuple[str, str, tuple[tuple[str, str], ...]], Source] = {}
    for s in sources:
        if s.type != "deb" or s.suite not in suites or s.uri.startswith("cdrom:"):
            continue
        key = (s.uri.rstrip("/"), s.suite, s.options)
        old = merged.get(key)
        comps = s.components if old is None else tuple(dict.fromkeys(old.components + s.components))
        merged[key] = replace(s, components=comps) if old is None else replace(old, components=comps)
    return list(merged.values())


def nvidia_component(release: Release) -> str:
    """The archive component that holds NVIDIA's driver libraries."""
    return "restricted" if release.family == "ubuntu" else "non-free"


def with_component(sources: Iterable[Source], component: str) -> list[Source]:
    return [replace(s, components=tuple(dict.fromkeys((*s.components, component)))) for s in sources]


def render_deb822(sources: Iterable[Source]) -> str:
    """The private sources file: one stanza per entry, options as they were (inline keys included)."""
    stanzas = []
    for s in sources:
        lines = [f"Types: {s.type}", f"URIs: {s.uri}", f"Suites: {s.suite}"]
        if s.components:
            lines.append(f"Components: {' '.join(s.components)}")
        for key, value in s.options:
            first, *rest = value.split("\n")
            lines.append(f"{key}: {first}")
            lines += [f" {r}" for r in rest]
        stanzas.append("\n".join(lines) + "\n")
    return "\n".join(stanzas)


# ------------------------------------------------------------------ package choice


def ubuntu_compute_package(names: Iterable[str]) -> str | None:
    """Ubuntu's ``libnvidia-compute-NNN`` holding libcuda.so.1 and libnvidia-ml.so.1: the newest NNN,
    not ``-server`` unless only ``-server`` builds exist."""
    best: dict[bool, tuple[int, str]] = {}
    for name in names:
        m = re.fullmatch(r"libnvidia-compute-(\d+)(-server)?", name.strip())
        if m is None:
            continue
        server = m.group(2) is not None
        cand = (int(m.group(1)), name.strip())
        if server not in best or cand > best[server]:
            best[server] = cand
    choice = best.get(False) or best.get(True)
    return choice[1] if choice else None


@dataclass(frozen=True)
class Deb:
    """One package file as apt would fetch it."""
    name: str
    version: str
    arch: str
    filename: str       # as apt-get download names it (epoch's ':' as %3a)
    size: int
    uri: str
    checksum: str       # "<Type>:<hex>" from the index, or ""
    sha256: str = field(default="", compare=False)


def parse_print_uris(text: str) -> list[Deb]:
    """``apt-get --print-uris`` lines: 'URI' file size hash (the hash may be missing, as it is for
    packages of Debian's security archive)."""
    out: list[Deb] = []
    for line in text.splitlines():
        m = re.match(r"^'([^']+)'\s+(\S+)\s+(\d+)(?:\s+(\S+))?", line)
        if m is None or not m.group(2).endswith(".deb"):
            continue
        uri, filename, size, checksum = m.groups()
        name, version, arch = urllib.parse.unquote(filename[:-4]).split("_")
        out.append(Deb(name, version, arch, filename, int(size), uri, checksum or ""))
    return out


def parse_base(dumpavail: str) -> list[str]:
    """Packages every host of the release has: Essential: yes or Priority: required (with apt)."""
    names = ["apt"]
    for st in _deb822_stanzas(dumpavail):
        if st.fields.get("essential") == "yes" or st.fields.get("priority") == "required":
            names.append(st.fields["package"])
    return sorted(set(names))


def headers_meta(release: Release, dpkg_arch: str) -> str:
    """The distro's meta package that depends on its newest kernel headers."""
    return "linux-headers-generic" if release.family == "ubuntu" else f"linux-headers-{dpkg_arch}"


def headers_only(debs: Iterable[Deb]) -> list[Deb]:
    """Of a linux-headers meta's closure, the header packages themselves (not the compiler or
    kbuild tools that module builds need: bcc compiles with its own clang)."""
    return [d for d in debs if d.name.startswith("linux-headers-")]


# ------------------------------------------------------------------ private apt


class PrivateApt:
    """apt-get and apt-cache over a private state folder."""

    def __init__(self, state: Path, sources: Sequence[Source]) -> None:
        self.state = state
        self.sources = list(sources)

    def options(self) -> list[str]:
        s = self.state
        opts = {
            "Dir::State::Lists": s / "lists", "Dir::State::status": s / "status",
            "Dir::Etc::SourceList": s / "sources.list", "Dir::Etc::SourceParts": s / "sources.list.d",
            "Dir::Cache::Archives": s / "archives", "Dir::Cache::pkgcache": "", "Dir::Cache::srcpkgcache": "",
            "APT::Get::List-Cleanup": "0", "APT::Sandbox::User": "root",
            "Acquire::AllowInsecureRepositories": "false", "APT::Install-Recommends": "false",
        }
        return [a for k, v in opts.items() for a in ("-o", f"{k}={v}")]

    def prepare(self) -> None:
        for d in ("lists/partial", "archives/partial", "sources.list.d"):
            (self.state / d).mkdir(parents=True, exist_ok=True)
        (self.state / "sources.list").write_text("")
        (self.state / "status").write_text("")
        (self.state / "sources.list.d" / "gputop.sources").write_text(render_deb822(self.sources))

    def run(self, tool: str, *args: str, cwd: Path | None = None) -> str:
        res = subprocess.run([tool, *self.options(), *args], capture_output=True, text=True, cwd=cwd)
        if res.returncode != 0:
            raise PrivAptError(f"{tool} {' '.join(args)} failed: {res.stderr.strip()[-1500:]}",
                               "check that this machine reaches the mirrors of its apt sources")
        return res.stdout

    def update(self) -> None:
        self.prepare()
        self.run("apt-get", "-q", "update")

    def search_names(self, regex: str) -> list[str]:
        """Real (downloadable) packages whose name matches; apt-cache pkgnames would list virtual ones."""
        return [line.split(" - ", 1)[0] for line in self.run("apt-cache", "search", "--names-only", regex).splitlines()]

    def has(self, name: str) -> bool:
        """Whether ``name`` is a real package of these sources (not only a virtual one)."""
        res = subprocess.run(["apt-cache", *self.options(), "show", "--no-all-versions", name],
                             capture_output=True, text=True)
        return res.returncode == 0 and bool(res.stdout.strip())

    def closure(self, names: Sequence[str]) -> list[Deb]:
        """What installing ``names`` on a bare host fetches (dpkg status empty), without recommends."""
        return parse_print_uris(self.run("apt-get", "-qq", "--print-uris", "install", *names))

    def files(self, names: Sequence[str]) -> list[Deb]:
        """The candidate package files of ``names`` themselves (no dependencies)."""
        return parse_print_uris(self.run("apt-get", "-qq", "--print-uris", "download", *names))

    def base(self) -> set[str]:
        """The closure of the release's essential and required packages and apt: on every host."""
        return {d.name for d in self.closure(parse_base(self.run("apt-cache", "dumpavail")))}

    def download(self, debs: Sequence[Deb], dest: Path) -> list[Deb]:
        """Fetch (or keep, when already there whole) each package file into ``dest``; with sha256."""
        dest.mkdir(parents=True, exist_ok=True)
        missing = [d for d in debs if not _complete(dest / d.filename, d)]
        for d in missing:
            (dest / d.filename).unlink(missing_ok=True)
        if missing:
            self.run("apt-get", "-q", "download", *(f"{d.name}={d.version}" for d in missing), cwd=dest)
        out = []
        for d in debs:
            path = dest / d.filename
            if not path.is_file():
                raise PrivAptError(f"apt-get download did not fetch {d.filename}", "run it again")
            out.append(replace(d, sha256=hashlib.sha256(path.read_bytes()).hexdigest()))
        return out


def _complete(path: Path, deb: Deb) -> bool:
    if not path.is_file() or path.stat().st_size != deb.size:
        return False
    kind, _, want = deb.checksum.partition(":")
    algo = {"MD5Sum": "md5", "SHA1": "sha1", "SHA256": "sha256", "SHA512": "sha512"}.get(kind)
    return algo is None or hashlib.new(algo, path.read_bytes()).hexdigest() == want


def machine_apt(state: Path, nvidia: bool = False, pockets: Sequence[str] = OWN_POCKETS, etc: Path = ETC_APT,
                os_release: Path = OS_RELEASE) -> tuple[PrivateApt, Release]:
    """The machine's own mirrors of its release, with the NVIDIA component added when asked."""
    release = parse_os_release(os_release.read_text())
    sources = own_release(read_sources(etc), release, pockets)
    if not sources:
        raise PrivAptError(f"no enabled apt source of {release.pretty} ({'/'.join(release.codenames)}) "
                           f"in {etc}", f"add this release's mirror to {etc}/sources.list.d")
    if nvidia:
        sources = with_component(sources, nvidia_component(release))
    return PrivateApt(state, sources), release


# ------------------------------------------------------------------ commands


def nvidia_libs(state: Path, dest: Path) -> None:
    apt, release = machine_apt(state, nvidia=True, pockets=RELEASE_ONLY)
    apt.update()
    if release.family == "ubuntu":
        pkg = ubuntu_compute_package(apt.search_names("^libnvidia-compute-[0-9]+(-server)?$"))
        if pkg is None:
            raise PrivAptError("no libnvidia-compute-NNN package in this Ubuntu release's restricted component",
                               "check that the mirror carries 'restricted'")
        pkgs: tuple[str, ...] = (pkg,)
    else:
        pkgs = DEBIAN_NVIDIA
    debs = apt.files(pkgs)
    got = apt.download(debs, state / "debs")
    with tempfile.TemporaryDirectory(dir=state) as tmp:
        for d in got:
            subprocess.run(["dpkg", "-x", str(state / "debs" / d.filename), tmp], check=True)
        dest.mkdir(parents=True, exist_ok=True)
        for lib in ("libcuda.so.1", "libnvidia-ml.so.1"):
            found = sorted(Path(tmp).rglob(lib))
            if not found:
                raise PrivAptError(f"{lib} is not in {', '.join(d.filename for d in got)}",
                                   "the distro's NVIDIA packages changed; see scripts/privapt.py")
            shutil.copyfile(found[0].resolve(), dest / lib)
    print(f"privapt: {', '.join(d.filename for d in got)} -> {dest}")


def bundle(state: Path, dest: Path, kernels: Sequence[str], meta_pkg: str | None) -> list[Deb]:
    apt, release = machine_apt(state)
    apt.update()
    base = apt.base()
    debs = [d for d in apt.closure(BUNDLE_PACKAGES) if d.name not in base]
    meta = meta_pkg or headers_meta(release, subprocess.run(["dpkg", "--print-architecture"], capture_output=True,
                                                            text=True, check=True).stdout.strip())
    headers = headers_only(apt.closure([meta]))
    for rel in kernels:
        if apt.has(f"linux-headers-{rel}"):
            headers += [d for d in headers_only(apt.closure([f"linux-headers-{rel}"])) if d not in headers]
        else:
            print(f"privapt: {release.pretty} has no linux-headers-{rel}; the fallback headers stand in",
                  file=sys.stderr)
    got = apt.download(debs, dest / "debs") + apt.download(headers, dest / "headers")
    for sub, keep in (("debs", debs), ("headers", headers)):
        names = {d.filename for d in keep}
        for stale in (dest / sub).glob("*.deb"):
            if stale.name not in names:
                stale.unlink()
    (dest / "debs.json").write_text(json.dumps({
        "release": release.pretty, "codenames": list(release.codenames), "headers_meta": meta,
        "kernels": list(kernels), "base_excluded": sorted(base),
        "packages": [{"name": d.name, "version": d.version, "arch": d.arch,
                      "file": ("headers/" if d in headers else "debs/") + d.filename, "size": d.size,
                      "sha256": d.sha256} for d in got]}, indent=1) + "\n")
    return got


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="privapt.py", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("sources", help="print the private sources (deb822) of this machine's own release")
    p.add_argument("--nvidia", action="store_true", help="with the component of NVIDIA's driver libraries")
    p = sub.add_parser("nvidia-libs", help="libcuda.so.1 and libnvidia-ml.so.1 into DEST")
    p.add_argument("state", type=Path)
    p.add_argument("dest", type=Path)
    p = sub.add_parser("bundle", help="bcc's packages and fallback kernel headers into DEST")
    p.add_argument("state", type=Path)
    p.add_argument("dest", type=Path)
    p.add_argument("--kernel", action="append", default=[], metavar="RELEASE",
                   help="also the exact headers of this kernel release, when the distro has them")
    p.add_argument("--headers-meta", metavar="PKG", help="the headers meta package (default: the distro's)")
    args = ap.parse_args(argv)
    try:
        if args.cmd == "sources":
            apt, _ = machine_apt(Path(os.devnull), args.nvidia)
            sys.stdout.write(render_deb822(apt.sources))
        elif args.cmd == "nvidia-libs":
            nvidia_libs(args.state.resolve(), args.dest.resolve())
        else:
            got = bundle(args.state.resolve(), args.dest.resolve(), args.kernel, args.headers_meta)
            print(f"privapt: {len(got)} packages, {sum(d.size for d in got) / 1e6:.1f} MB in {args.dest}")
    except PrivAptError as e:
        print(f"privapt: error: {e}\nhint: {e.hint}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
