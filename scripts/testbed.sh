#!/usr/bin/env bash
# Fetch the GPU-less test bed into .cache/testbed (idempotent, cached):
#   cudart/   libcudart.so.12 + libcudart_static.a  (wheel nvidia-cuda-runtime-cu12)
#   cudart13/ libcudart.so.13 + libcudart_static.a  (wheel nvidia-cuda-runtime 13.x, what PyTorch's cu130 wheels load)
#   nvidia/   libcuda.so.1 + libnvidia-ml.so.1      (Debian: the 535 branch's libcuda1 + libnvidia-ml1 from
#             non-free, drivers/535, on every release; Ubuntu: the newest libnvidia-compute-NNN from restricted)
#   nccl/VERSION/     libnccl.so.2 of the nvidia-nccl-cu12 2.27.5 wheel (what PyTorch 2.9 and 2.10 pin) and of
#                     nvidia-nccl-cu13 2.32.6 (AlltoAll, Gather, Scatter, the *Config forms)
#   drivers/BRANCH/   libcuda.so.1 + libnvidia-ml.so.1 of each driver branch Debian holds (470, 535, 550, 555)
#   runtimes/X.Y/     libcudart.so.N of every CUDA runtime minor 12.0 ... 13.x (scripts/testbed_libs.py;
#                     the support matrix, docs/support.md)
# The mirrors are those of the machine's own apt sources for its release; its package lists and
# dpkg database are left untouched: apt runs with a private state under .cache/testbed/apt.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
TB="${GPUTOP_TESTBED:-$ROOT/.cache/testbed}"
PY="$ROOT/.venv/bin/python"
mkdir -p "$TB"
# --- the arm64 test bed (issue 39): the aarch64 runtimes, Debian's arm64 libcuda1/libnvidia-ml1 and
# linux-headers-arm64, for tests/unit/test_arm64.py, tests/bpf/test_arm64_compile.py and the matrix's arm64
# suites (scripts/matrix/testbed_arm64.py; cached), fetched beside the rest (its own folder and apt state).
# Not fatal: without it those tests skip, saying so
python3 "$ROOT/scripts/matrix/testbed_arm64.py" "$TB-arm64" &
ARM64_PID=$!
trap 'kill $ARM64_PID 2>/dev/null' EXIT

# --- runtimes from the wheels -----------------------------------------------------------
# fetch_runtime DIR WHEEL-SPEC SONAME: libcudart.so.N and libcudart_static.a from the wheel's lib folder
fetch_runtime() {
    local dir=$1 spec=$2 soname=$3
    if [ -f "$TB/$dir/$soname" ] && [ -f "$TB/$dir/libcudart_static.a" ]; then
        return 0
    fi
    echo "testbed: fetching $spec"
    local tmp
    tmp=$(mktemp -d)
    "$PY" -m pip download -q --no-deps --only-binary=:all: -d "$tmp" "$spec" 2>&1 | grep -v '^WARNING: Location' >&2 || true
    "$PY" - "$tmp" "$TB/$dir" "$soname" <<'PYEOF'
import sys, zipfile, pathlib, glob
src, dst, soname = sys.argv[1], pathlib.Path(sys.argv[2]), sys.argv[3]
wheels = glob.glob(src + "/*.whl")
if not wheels:
    sys.exit("testbed: the runtime wheel could not be downloaded (see pip's output above)")
dst.mkdir(parents=True, exist_ok=True)
with zipfile.ZipFile(wheels[0]) as z:
    for n in z.namelist():
        base = n.rsplit("/", 1)[-1]
        # nvidia/cuda_runtime/lib/ (12.x wheels) or nvidia/cu13/lib/ (13.x)
        if n.startswith("nvidia/") and "/lib/" in n and base in (soname, "libcudart_static.a"):
            (dst / base).write_bytes(z.read(n))
for base in (soname, "libcudart_static.a"):
    if not (dst / base).is_file():
        sys.exit(f"testbed: {base} is not in {wheels[0]}")
PYEOF
    rm -rf "$tmp"
}
fetch_runtime cudart nvidia-cuda-runtime-cu12==12.9.79 libcudart.so.12
fetch_runtime cudart13 nvidia-cuda-runtime==13.0.96 libcudart.so.13

# --- NCCL from its wheels: nvidia/nccl/lib/libnccl.so.2 --------------------------------------
fetch_nccl() {
    local version=$1 spec=$2
    [ -f "$TB/nccl/$version/libnccl.so.2" ] && return 0
    echo "testbed: fetching $spec"
    local tmp
    tmp=$(mktemp -d)
    "$PY" -m pip download -q --no-deps --only-binary=:all: -d "$tmp" "$spec" 2>&1 | grep -v '^WARNING: Location' >&2 || true
    "$PY" - "$tmp" "$TB/nccl/$version" <<'PYEOF'
import sys, zipfile, pathlib, glob, shutil
src, dst = sys.argv[1], pathlib.Path(sys.argv[2])
wheels = glob.glob(src + "/*.whl")
if not wheels:
    sys.exit("testbed: the NCCL wheel could not be downloaded (see pip's output above)")
dst.mkdir(parents=True, exist_ok=True)
with zipfile.ZipFile(wheels[0]) as z, z.open("nvidia/nccl/lib/libnccl.so.2") as f, \
        open(dst / "libnccl.so.2.part", "wb") as out:
    shutil.copyfileobj(f, out, 1 << 20)
(dst / "libnccl.so.2.part").rename(dst / "libnccl.so.2")
PYEOF
    rm -rf "$tmp"
}
fetch_nccl 2.27.5 nvidia-nccl-cu12==2.27.5
fetch_nccl 2.32.6 nvidia-nccl-cu13==2.32.6

# --- the support matrix: every driver branch and every runtime minor (scripts/testbed_libs.py, cached)
python3 "$ROOT/scripts/testbed_libs.py" drivers "$TB/apt-branches" "$TB/drivers"
# --- the everyday driver + NVML: on Debian the 535 branch's libcuda1 + libnvidia-ml1 (non-free) whatever
# the release (testbed_libs.py EVERYDAY_BRANCH: Debian 11's own is 470), elsewhere the distro's own
# (Ubuntu's libnvidia-compute-NNN, restricted), from the mirrors of the machine's apt sources (scripts/privapt.py)
NV="$TB/nvidia"
if [ ! -e "$NV/libcuda.so.1" ] || [ ! -e "$NV/libnvidia-ml.so.1" ]; then
    rc=0
    python3 "$ROOT/scripts/testbed_libs.py" everyday "$TB/drivers" "$NV" || rc=$?
    if [ $rc -eq 3 ]; then
        echo "testbed: fetching libcuda.so.1 and libnvidia-ml.so.1 with a private apt state"
        python3 "$ROOT/scripts/privapt.py" nvidia-libs "$TB/apt" "$NV"
    elif [ $rc -ne 0 ]; then
        exit $rc
    fi
fi
python3 "$ROOT/scripts/testbed_libs.py" runtimes "$PY" "$TB/runtimes"
wait "$ARM64_PID" || echo "testbed: the arm64 test bed could not be fetched; its tests skip" >&2
trap - EXIT
echo "testbed: ready in $TB"
