#!/usr/bin/env bash
# gputop for GPU hosts without a package registry (docs/offline-install.md).
#
#   scripts/offline-bundle.sh gather DIR [--kernel RELEASE]... [--python-version X.Y] [--headers-meta PKG]
#
# Run on a connected machine of the same distro release as the GPU hosts (Debian or Ubuntu). It gathers
# into DIR everything gputop needs that such a host may lack:
#   debs/      python3-bpfcc and binutils (c++filt) and their dependency closure (libbpfcc, LLVM, clang,
#              python3, ...), less the packages every host of the release has (essential, required and
#              apt, with their dependencies: libc6 & co)
#   headers/   fallback kernel headers: the header packages of the distro's newest linux-headers meta,
#              plus linux-headers-RELEASE for each --kernel the distro has
#   wheels/    gputop's wheel (built from this checkout) and its dependencies' for the target Python
#   install.sh installs the bundle on the GPU host:  DIR/install.sh PREFIX
#   MANIFEST.json, SHA256SUMS
# Mirrors and indexes are the machine's own (apt sources, pip configuration); apt runs with a private
# state in .cache/offline-apt, so the machine's package lists stay as they are. Run it again to refresh:
# files already in DIR are kept when they are still current.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)

usage() {
    echo "usage: $0 gather DIR [--kernel RELEASE]... [--python-version X.Y] [--headers-meta PKG]" >&2
    exit 2
}
die() {
    echo "offline-bundle: error: $1" >&2
    echo "hint: $2" >&2
    exit 1
}

[ "${1:-}" = gather ] && [ $# -ge 2 ] || usage
DIR=$2
shift 2
APT_ARGS=()
PYVER=""
while [ $# -gt 0 ]; do
    case $1 in
        --kernel) [ $# -ge 2 ] || usage; APT_ARGS+=(--kernel "$2"); shift 2 ;;
        --headers-meta) [ $# -ge 2 ] || usage; APT_ARGS+=(--headers-meta "$2"); shift 2 ;;
        --python-version) [ $# -ge 2 ] || usage; PYVER=$2; shift 2 ;;
        *) usage ;;
    esac
done
[[ -z "$PYVER" || "$PYVER" =~ ^3\.[0-9]+$ ]] || die "--python-version $PYVER is not of the form 3.N" \
    "give the GPU hosts' Python version, e.g. --python-version 3.12"
command -v apt-get >/dev/null && command -v dpkg >/dev/null || die "apt-get and dpkg are needed" \
    "gather on a Debian or Ubuntu machine of the GPU hosts' release"
mkdir -p "$DIR"
DIR=$(cd "$DIR" && pwd)

# the distro's python3 is what the GPU hosts have (same release); pip comes from the checkout's venv
# when there is one (its version and configuration), else from the machine's python3
if [ -z "$PYVER" ]; then
    [ -x /usr/bin/python3 ] || die "the distro's python3 is not installed" "pass --python-version X.Y"
    PYVER=$(/usr/bin/python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')
fi
PIP_PY=python3
[ -x "$ROOT/.venv/bin/python" ] && PIP_PY="$ROOT/.venv/bin/python"
"$PIP_PY" -m pip --version >/dev/null 2>&1 || die "$PIP_PY has no pip" "install pip (python3-pip) for gathering"

echo "offline-bundle: Debian packages (private apt state in $ROOT/.cache/offline-apt)"
python3 "$ROOT/scripts/privapt.py" bundle "$ROOT/.cache/offline-apt" "$DIR" "${APT_ARGS[@]}"

echo "offline-bundle: wheels for Python $PYVER"
GLIBC=$(getconf GNU_LIBC_VERSION | awk '{print $2}')           # e.g. 2.36: the release's glibc
ARCH=$(uname -m)
PLATFORMS=()
for ((minor = ${GLIBC#*.}; minor >= 17; minor--)); do
    PLATFORMS+=(--platform "manylinux_2_${minor}_${ARCH}")
done
PLATFORMS+=(--platform "manylinux2014_${ARCH}" --platform "manylinux2010_${ARCH}" --platform "manylinux1_${ARCH}")
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
"$PIP_PY" -m pip wheel -q --no-deps -w "$TMP/build" "$ROOT" 2>&1 | grep -v '^WARNING: Location' >&2 || true
WHEEL=$(ls "$TMP"/build/gputop_ebpf-*.whl 2>/dev/null | head -n1)
[ -n "$WHEEL" ] || die "gputop's wheel could not be built (see pip's output above)" "run pip wheel $ROOT by hand"
"$PIP_PY" -m pip download -q --only-binary=:all: --python-version "$PYVER" --implementation cp "${PLATFORMS[@]}" \
    -d "$TMP/wheels" "$WHEEL" 2>&1 | grep -v '^WARNING: Location' >&2 || true
ls "$TMP"/wheels/*.whl >/dev/null 2>&1 && [ -n "$(ls "$TMP"/wheels/gputop_ebpf-*.whl 2>/dev/null)" ] \
    || die "the wheels of gputop's dependencies could not be downloaded (see pip's output above)" \
        "check pip's configuration (pip config list) and that wheels exist for Python $PYVER"
# pip evaluates environment markers (python_version < "3.11": tomli) for the Python it runs on, not for
# --python-version: add what the target's markers ask for until nothing is missing
"$PIP_PY" - "$TMP/wheels" "$PYVER" "$ARCH" "${PLATFORMS[@]}" <<'PYEOF' || die "the wheels for Python $PYVER are \
incomplete (see above)" "check that wheels of every dependency exist for Python $PYVER"
import re, subprocess, sys, zipfile
from pathlib import Path
try:
    from packaging.requirements import Requirement
except ImportError:
    from pip._vendor.packaging.requirements import Requirement
wheels, pyver, arch, platforms = Path(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4:]
env = {"python_version": pyver, "python_full_version": pyver + ".0", "implementation_name": "cpython",
       "platform_python_implementation": "CPython", "sys_platform": "linux", "platform_system": "Linux",
       "platform_machine": arch, "os_name": "posix", "extra": ""}
def canon(name): return re.sub(r"[-_.]+", "-", name).lower()
for _ in range(20):
    have, need = set(), {}
    for whl in wheels.glob("*.whl"):
        with zipfile.ZipFile(whl) as z:
            meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA") and n.count("/") == 1)
            text = z.read(meta).decode()
        have.add(canon(re.search(r"^Name: (.+)$", text, re.M).group(1).strip()))
        for line in re.findall(r"^Requires-Dist: (.+)$", text, re.M):
            req = Requirement(line)
            if req.marker is None or req.marker.evaluate(env):
                need[canon(req.name)] = f"{req.name}{req.specifier}"
    missing = [spec for name, spec in need.items() if name not in have]
    if not missing:
        sys.exit(0)
    print(f"offline-bundle: for Python {pyver} also {', '.join(missing)}", file=sys.stderr)
    res = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                          "--python-version", pyver, "--implementation", "cp", *platforms, "-d", str(wheels),
                          *missing], stderr=subprocess.PIPE, text=True)
    sys.stderr.writelines(l for l in res.stderr.splitlines(True) if not l.startswith("WARNING: Location"))
    if res.returncode != 0:
        sys.exit(1)
sys.exit("offline-bundle: the requirements do not settle")
PYEOF
rm -rf "$DIR/wheels"
mv "$TMP/wheels" "$DIR/wheels"

cp "$ROOT/scripts/offline-install.sh" "$DIR/install.sh"
chmod 755 "$DIR/install.sh"
python3 - "$DIR" "$PYVER" "$GLIBC" "$(git -C "$ROOT" rev-parse HEAD 2>/dev/null || echo unknown)" <<'PYEOF'
import hashlib, json, pathlib, sys, time
d, pyver, glibc, commit = pathlib.Path(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
debs = json.loads((d / "debs.json").read_text())
def sha(p): return hashlib.sha256(p.read_bytes()).hexdigest()
wheels = [{"file": f"wheels/{p.name}", "size": p.stat().st_size, "sha256": sha(p)}
          for p in sorted((d / "wheels").glob("*.whl"))]
manifest = {"gputop_commit": commit, "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "release": debs["release"], "codenames": debs["codenames"], "python_version": pyver, "glibc": glibc,
            "headers_meta": debs["headers_meta"], "kernels": debs["kernels"],
            "packages": debs["packages"], "wheels": wheels, "base_excluded": debs["base_excluded"]}
(d / "MANIFEST.json").write_text(json.dumps(manifest, indent=1) + "\n")
files = [(p["sha256"], p["file"]) for p in debs["packages"]] + [(w["sha256"], w["file"]) for w in wheels]
files.append((sha(d / "install.sh"), "install.sh"))
(d / "SHA256SUMS").write_text("".join(f"{h}  {f}\n" for h, f in sorted(files, key=lambda x: x[1])))
(d / "debs.json").unlink()
size = sum(p["size"] for p in debs["packages"]) + sum(w["size"] for w in wheels)
print(f"offline-bundle: {len(debs['packages'])} packages and {len(wheels)} wheels, {size / 1e6:.1f} MB in {d}")
PYEOF
echo "offline-bundle: copy $DIR to the GPU host and run: $DIR/install.sh PREFIX"
