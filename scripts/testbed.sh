#!/usr/bin/env bash
# Fetch the GPU-less test bed into .cache/testbed (idempotent, cached):
#   cudart/   libcudart.so.12 + libcudart_static.a  (PyPI nvidia-cuda-runtime-cu12)
#   nvidia/   libcuda.so.1 + libnvidia-ml.so.1      (Debian libcuda1, libnvidia-ml1, non-free)
# The machine's own apt configuration and lists are left untouched: apt runs with a
# private Dir::State::Lists and a private sources file under .cache/testbed/apt.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
TB="${GPUTOP_TESTBED:-$ROOT/.cache/testbed}"
CUDART_VERSION=12.9.79
PY="$ROOT/.venv/bin/python"
mkdir -p "$TB"

# --- runtime from the wheel -------------------------------------------------------------
if [ ! -f "$TB/cudart/libcudart.so.12" ] || [ ! -f "$TB/cudart/libcudart_static.a" ]; then
    echo "testbed: fetching nvidia-cuda-runtime-cu12==$CUDART_VERSION"
    tmp=$(mktemp -d)
    "$PY" -m pip download -q --no-deps --only-binary=:all: -d "$tmp" "nvidia-cuda-runtime-cu12==$CUDART_VERSION"
    "$PY" - "$tmp" "$TB/cudart" <<'PYEOF'
import sys, zipfile, pathlib, glob
src, dst = sys.argv[1], pathlib.Path(sys.argv[2])
dst.mkdir(parents=True, exist_ok=True)
whl = glob.glob(src + "/*.whl")[0]
with zipfile.ZipFile(whl) as z:
    for n in z.namelist():
        base = n.rsplit("/", 1)[-1]
        if n.startswith("nvidia/cuda_runtime/lib/") and base in ("libcudart.so.12", "libcudart_static.a"):
            (dst / base).write_bytes(z.read(n))
PYEOF
    rm -rf "$tmp"
fi

# --- driver + NVML from Debian non-free ---------------------------------------------------
NV="$TB/nvidia"
if [ ! -e "$NV/libcuda.so.1" ] || [ ! -e "$NV/libnvidia-ml.so.1" ]; then
    echo "testbed: fetching libcuda1 and libnvidia-ml1 (Debian non-free) with a private apt state"
    A="$TB/apt"
    mkdir -p "$A/lists/partial" "$A/archives/partial" "$A/debs"
    # the distro's codename; Ubuntu hosts fetch from Debian bookworm as well
    cat > "$A/sources.list" <<SRC
deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian bookworm non-free
SRC
    OPTS=(-o "Dir::State::Lists=$A/lists" -o "Dir::Etc::SourceList=$A/sources.list"
          -o "Dir::Etc::SourceParts=/dev/null" -o "Dir::Cache::pkgcache=" -o "Dir::Cache::srcpkgcache="
          -o "Dir::Cache::Archives=$A/archives" -o "APT::Get::List-Cleanup=0"
          -o "APT::Sandbox::User=root" -o "Acquire::AllowInsecureRepositories=false")
    apt-get "${OPTS[@]}" -q update >/dev/null
    (cd "$A/debs" && apt-get "${OPTS[@]}" -q download libcuda1 libnvidia-ml1 >/dev/null)
    rm -rf "$A/x"; mkdir -p "$A/x" "$NV"
    for deb in "$A"/debs/*.deb; do dpkg -x "$deb" "$A/x"; done
    for lib in libcuda.so.1 libnvidia-ml.so.1; do
        real=$(find "$A/x" -name "$lib" | head -n1)
        [ -n "$real" ] || { echo "testbed: $lib not found in the Debian packages" >&2; exit 1; }
        cp -L "$real" "$NV/$lib"
    done
fi
echo "testbed: ready in $TB"
