#!/bin/sh
# install.sh of a gputop offline bundle (made by scripts/offline-bundle.sh gather; docs/offline-install.md).
#
#   ./install.sh [--all] PREFIX
#
# Installs gputop into PREFIX without touching the system: no apt, no dpkg database, no pip, no venv,
# nothing outside PREFIX. Needs only sh, dpkg-deb and sha256sum (every Debian and Ubuntu host has them).
#   - each bundled package the host does not have installed is unpacked with dpkg -x (with --all: each
#     one, installed or not; the C library and its base packages never are);
#   - the wheels are unpacked into PREFIX/lib/gputop/site-packages (python3: the host's, or the
#     bundle's when the host has none);
#   - Debian's split kernel headers are merged into PREFIX/lib/gputop/kernel-headers;
#   - PREFIX/bin/gputop runs gputop with PYTHONPATH and LD_LIBRARY_PATH pointing into PREFIX (and
#     PREFIX/usr/bin last on PATH, for c++filt), and
#     BCC_KERNEL_SOURCE at the bundled headers when the running kernel has none of its own.
# Installing again over the same PREFIX refreshes it. Remove PREFIX to uninstall.
set -eu

die() {
    echo "install.sh: error: $1" >&2
    echo "hint: $2" >&2
    exit 1
}
usage() {
    echo "usage: $0 [--all] PREFIX" >&2
    exit 2
}

ALL=0
if [ "${1:-}" = --all ]; then
    ALL=1
    shift
fi
[ $# -eq 1 ] || usage
case $1 in -*) usage ;; esac
B=$(cd "$(dirname "$0")" && pwd)
for tool in dpkg-deb dpkg-query sha256sum; do
    command -v "$tool" >/dev/null 2>&1 || die "$tool is missing" "install.sh needs a Debian or Ubuntu host"
done
[ -f "$B/SHA256SUMS" ] || die "$B is not a gputop bundle (no SHA256SUMS)" "run install.sh from the bundle's folder"
(cd "$B" && sha256sum --check --quiet --strict SHA256SUMS) ||
    die "the bundle in $B is damaged (checksums differ)" "copy it again from where it was gathered"
mkdir -p "$1"
P=$(cd "$1" && pwd)
case $P in
    /) die "PREFIX must not be /" "give a folder of its own, e.g. /opt/gputop" ;;
    *[\'\"\$\`\\:]*) die "PREFIX $P holds a character the wrapper cannot quote" "choose a plain path" ;;
esac

# --- Debian packages ------------------------------------------------------------------------
# never unpacked: the C library, the loader and the base every host has (the bundle leaves them out too)
never() {
    case $1 in
        libc6 | libc6-* | libc-bin | libc-dev-bin | libgcc-s1 | libstdc++6 | gcc-*-base | dpkg | base-files | \
            libcrypt1 | zlib1g | libselinux1 | libpcre2-8-0 | debconf | perl-base | bash | dash | coreutils) return 0 ;;
    esac
    return 1
}
mkdir -p "$P/lib/gputop"
: >"$P/lib/gputop/packages.txt"
unpacked=0
kept=0
for deb in "$B"/debs/*.deb "$B"/headers/*.deb; do
    [ -f "$deb" ] || continue
    pkg=$(dpkg-deb --field "$deb" Package)
    ver=$(dpkg-deb --field "$deb" Version)
    if never "$pkg"; then
        continue
    fi
    status=$(dpkg-query --show --showformat='${db:Status-Abbrev}' "$pkg" 2>/dev/null || true)
    if [ "$ALL" = 0 ] && [ "${status%% *}" = ii ]; then
        kept=$((kept + 1))
        continue
    fi
    dpkg -x "$deb" "$P"
    echo "$pkg $ver" >>"$P/lib/gputop/packages.txt"
    unpacked=$((unpacked + 1))
done
echo "install.sh: $unpacked packages unpacked into $P, $kept already installed on this host"

LIBS=""
for d in "$P"/usr/lib/*-linux-gnu* "$P"/lib/*-linux-gnu*; do
    [ -d "$d" ] && LIBS="${LIBS:+$LIBS:}$d"
done

# --- Python and the wheels --------------------------------------------------------------------
if [ -x "$P/usr/bin/python3" ]; then
    PY="$P/usr/bin/python3"            # the host has no python3 package: the bundle's
elif [ -x /usr/bin/python3 ]; then
    PY=/usr/bin/python3
else
    die "no python3 on this host and none in the bundle" "install python3, or gather with a bundle that has it"
fi
SITE="$P/lib/gputop/site-packages"
LD_LIBRARY_PATH="$LIBS${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$PY" -s - "$B/wheels" "$SITE" <<'PYEOF'
import pathlib, shutil, sys, zipfile
src, site = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
shutil.rmtree(site, ignore_errors=True)
site.mkdir(parents=True)
for whl in sorted(src.glob("*.whl")):
    with zipfile.ZipFile(whl) as z:
        for info in z.infolist():
            parts = pathlib.PurePosixPath(info.filename).parts
            if not parts or ".." in parts or info.filename.startswith("/") or info.is_dir():
                continue
            if parts[0].endswith(".data"):          # NAME.data/purelib|platlib/... go to the site root
                if len(parts) < 3 or parts[1] not in ("purelib", "platlib"):
                    continue
                parts = parts[2:]
            dest = site.joinpath(*parts)
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(z.read(info))
print(f"install.sh: {len(list(src.glob('*.whl')))} wheels unpacked into {site} for {sys.executable} "
      f"(Python {sys.version_info[0]}.{sys.version_info[1]})")
PYEOF

# --- kernel headers: Debian's arch and -common halves merged, as gputop does for its fallback ---
HDR="$P/lib/gputop/kernel-headers"
rm -rf "$HDR"
if [ -d "$P/usr/src" ]; then
    PYTHONPATH="$SITE" LD_LIBRARY_PATH="$LIBS${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$PY" -s - "$P" "$HDR" <<'PYEOF'
import pathlib, sys
from gputop.sources.bpf.program import kheaders
prefix, dest = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
# /lib/modules/*/build in the packages point at the system's /usr/src: only the prefix's own trees count
cands = kheaders._candidates(prefix / "usr" / "src", prefix / "lib" / "gputop" / "no-modules")
# a flavour's tree (with include/generated) before a shared half that lacks it (Ubuntu's linux-headers-X)
cands.sort(key=lambda bs: (bs[0] / "include" / "generated").is_dir(), reverse=True)
for build, source in cands:
    merged = kheaders._merge(build, source, dest) if source is not None else build
    if merged.parent != dest:
        (dest / build.name).parent.mkdir(parents=True, exist_ok=True)
        (dest / build.name).symlink_to(merged)
if cands:
    (dest / "default").write_text(cands[0][0].name + "\n")
    print(f"install.sh: kernel headers {', '.join(b.name for b, _ in cands)} in {dest}")
PYEOF
fi

# --- the command ------------------------------------------------------------------------------
mkdir -p "$P/bin"
cat >"$P/lib/gputop/gputop-main.py" <<'PYEOF'
# started by PREFIX/bin/gputop: this folder, not the caller's, is sys.path[0]
import sys

from gputop.cli import main

sys.exit(main())
PYEOF
cat >"$P/bin/gputop" <<EOF
#!/bin/sh
# gputop from the offline bundle in $P (made by install.sh; docs/offline-install.md)
P='$P'
export PYTHONPATH="\$P/lib/gputop/site-packages:\$P/usr/lib/python3/dist-packages\${PYTHONPATH:+:\$PYTHONPATH}"
export LD_LIBRARY_PATH="$LIBS\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
export PATH="\${PATH:-/usr/bin:/bin}:\$P/usr/bin"     # the host's tools first; c++filt from the bundle if it has none
rel=\$(uname -r)
H="\$P/lib/gputop/kernel-headers"
if [ -z "\${BCC_KERNEL_SOURCE:-}" ] && [ ! -d "/lib/modules/\$rel/build/include" ] && [ -f "\$H/default" ]; then
    if [ -d "\$H/linux-headers-\$rel" ]; then
        export BCC_KERNEL_SOURCE="\$H/linux-headers-\$rel"
    else
        export BCC_KERNEL_SOURCE="\$H/\$(cat "\$H/default")"
    fi
fi
exec '$PY' -s "\$P/lib/gputop/gputop-main.py" "\$@"
EOF
chmod 755 "$P/bin/gputop"
echo "install.sh: done; run $P/bin/gputop (or: $P/bin/gputop doctor)"
