#!/usr/bin/env bash
# The whole check on a GPU host, in one run (docs/GPU-VALIDATION.md): what the host is, gputop
# installed from its offline bundle, `gputop doctor`, `gputop doctor --selftest`, bench/gpu_validate.py
# against PyTorch's profiler and nvidia-smi, and `gputop demo`'s GPU path.
#
#   bench/gpu_session.sh facts            what the host is (seconds; nothing installed)
#   bench/gpu_session.sh all              facts, then install, doctor, selftest, validation, demo
#
# Run as root from a checkout on the GPU host, whose python3 has PyTorch. The offline bundle
# (scripts/offline-bundle.sh gather, on a connected machine of a release at most as new as the
# host's C library) comes as a folder at $GPUTOP_BUNDLE, or as the parts bench/gpu_kit.sh makes
# ($GPUTOP_KIT_DIR/.kit*/bundle.tar.*, default this checkout: a channel that carries a limited size at a
# time takes them one by one).
# Everything goes to $OUT (default: a new folder /tmp/gputop-gpu-session.XXXXXX), at most eight files:
#   facts.txt install.txt doctor.txt (doctor, then the self-test) validate.txt results.json launch.txt
#   demo.txt session.txt
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
# $OUT and the work folder: given, or new ones of root's own (never a fixed name in a folder every
# user can write to, where another user could have made it first and put links or an install.sh in it)
OUT=${OUT:-$(mktemp -d /tmp/gputop-gpu-session.XXXXXX)}
PREFIX=${GPUTOP_PREFIX:-/opt/gputop}
WORK=${GPUTOP_WORK:-$(mktemp -d /var/tmp/gputop-gpu-work.XXXXXX)}
mkdir -p "$OUT" "$WORK"
cd "$ROOT" || exit 1
rm -f "$OUT"/*.txt "$OUT"/results.json
echo "gpu_session: results in $OUT" >&2
log() { echo "[$(date +%T)] $*" | tee -a "$OUT/session.txt" >&2; }
# one step: its output to $OUT/NAME, its status and time to session.txt; a step never stops the run
step() {
    local name=$1 limit=$2
    shift 2
    local t0=$SECONDS
    timeout --kill-after=45 "$limit" "$@" >>"$OUT/$name" 2>&1     # 45 s to stop cleanly (the validation: its summary)
    local rc=$?
    log "$name: exit $rc in $((SECONDS - t0)) s"
    return $rc
}

facts() {
    {
        echo "## host"
        uname -a
        grep -E '^(PRETTY_NAME|VERSION_ID|ID)=' /etc/os-release 2>/dev/null
        ldd --version 2>&1 | head -n1
        echo "nproc $(nproc)"
        command -v dpkg-deb dpkg-query sha256sum python3 gcc c++filt 2>&1
        python3 -c 'import sys; print("python3", sys.version.split()[0], sys.executable)' 2>&1
        # Triton and Inductor build their launchers with a C compiler and Python.h at first use
        python3 -c 'import os, sysconfig; h = os.path.join(sysconfig.get_paths()["include"], "Python.h");
print("Python.h", h if os.path.exists(h) else "absent")' 2>&1
        echo "## GPU"
        nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv 2>&1
        nvidia-smi 2>&1 | sed -n '1,4p'
        python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda,
                    "available", torch.cuda.is_available())' 2>&1 | tail -n1
        python3 -c 'import triton; print("triton", triton.__version__)' 2>&1 | tail -n1
        python3 -c 'import cupy; print("cupy", cupy.__version__)' 2>&1 | tail -n1
        echo "libcudart: $(python3 -c 'import glob, os, torch; d = os.path.dirname(torch.__file__); print(" ".join(sorted(glob.glob(d + "/../nvidia/*/lib/libcudart.so*") + glob.glob(d + "/lib/libcudart*.so*"))))' 2>&1 | tail -n1)"
        echo "libcuda: $(ldconfig -p 2>/dev/null | grep -m2 'libcuda.so' | tr -s ' ' | tr '\n' ';')"
        echo "## kernel"
        echo "release $(uname -r)"
        for f in /sys/kernel/btf/vmlinux /sys/kernel/kheaders.tar.xz /sys/bus/event_source/devices/uprobe \
                 /sys/bus/event_source/devices/kprobe /sys/kernel/tracing/uprobe_events /sys/kernel/debug/tracing \
                 "/lib/modules/$(uname -r)/build" /proc/config.gz; do
            if [ -e "$f" ]; then echo "present $f"; else echo "absent  $f"; fi
        done
        # kprobes: a kprobe event accepted by tracefs (and removed at once) says the kernel has them
        tr=/sys/kernel/tracing
        [ -e $tr/kprobe_events ] || { mount -t tracefs tracefs $tr 2>/dev/null || true; }
        if [ -w $tr/kprobe_events ] && echo 'p:gputop_probe_test do_sys_openat2' >>$tr/kprobe_events 2>/dev/null; then
            echo 'kprobes: yes (a kprobe on do_sys_openat2 was accepted)'
            echo '-:gputop_probe_test' >>$tr/kprobe_events
        else
            echo "kprobes: no ($( [ -e $tr/kprobe_events ] && echo 'tracefs refused a kprobe' || echo 'no kprobe_events in tracefs'))"
        fi
        if [ -d /sys/module/nvidia_uvm ]; then
            echo "nvidia_uvm: loaded, version $(cat /sys/module/nvidia_uvm/version 2>/dev/null || echo unknown)"
            grep -c 'uvm_perf_event_notify\|uvm_tools_record' /proc/kallsyms 2>/dev/null | sed 's/^/uvm symbols in kallsyms: /'
        else
            echo "nvidia_uvm: not loaded"
        fi
        echo "nvidia: $(cat /sys/module/nvidia/version 2>/dev/null || echo 'no /sys/module/nvidia')"
        grep -E '^(CONFIG_BPF_SYSCALL|CONFIG_UPROBE_EVENTS|CONFIG_KPROBE_EVENTS|CONFIG_DEBUG_INFO_BTF|CONFIG_IKHEADERS)=' \
            <(zcat /proc/config.gz 2>/dev/null) 2>/dev/null
        echo "unprivileged_bpf_disabled $(cat /proc/sys/kernel/unprivileged_bpf_disabled 2>&1)"
        echo "perf_event_paranoid $(cat /proc/sys/kernel/perf_event_paranoid 2>&1)"
        echo "## this checkout"
        git -C "$ROOT" log -1 --format='%H %s' 2>/dev/null || echo "(no git here)"
    } >"$OUT/facts.txt" 2>&1
    log "facts: $(grep -c . "$OUT/facts.txt") lines"
}

bundle() {
    # the bundle: $GPUTOP_BUNDLE, else the kit's parts put together
    if [ -n "${GPUTOP_BUNDLE:-}" ]; then
        echo "$GPUTOP_BUNDLE"
        return 0
    fi
    local kits=${GPUTOP_KIT_DIR:-$ROOT} parts want f
    # in the order of the parts' own numbers (bundle.tar.00, .01, ...), whichever .kitN holds them
    parts=$(for f in "$kits"/.kit[0-9]*/bundle.tar.*; do [ -f "$f" ] && echo "${f##*.} $f"; done | sort -n |
        cut -d' ' -f2-)
    want=$(cat "$kits"/.kit[0-9]*/PARTS 2>/dev/null | head -n1)
    if [ -z "$parts" ] || [ "$(echo "$parts" | wc -l)" != "${want:-x}" ]; then
        log "bundle: $(echo "$parts" | grep -c .) of ${want:-?} parts here (.kit*/bundle.tar.*): run bench/gpu_kit.sh, carry every part"
        return 1
    fi
    rm -rf "$WORK/bundle" "$WORK/validate"
    mkdir -p "$WORK/bundle"
    # shellcheck disable=SC2086
    cat $parts | tar -x -C "$WORK/bundle" || return 1
    echo "$WORK/bundle/gputop-bundle"
}

all() {
    facts
    local b
    if ! b=$(bundle); then
        log "stopping: no bundle"
        return 1
    fi
    step install.txt 120 "$b/install.sh" "$PREFIX" || return 1
    local gputop="$PREFIX/bin/gputop"
    step doctor.txt 120 "$gputop" doctor
    local cudart
    cudart=$(python3 -c 'import sys; sys.path.insert(0, "bench"); from gpu_workloads import torch_cudart
print(torch_cudart() or "")' 2>/dev/null)
    # a workload that hangs is stopped at 150 s; at the step's limit the lines compared so far are kept.
    # Where gputop cannot trace (doctor says why: a sandbox without eBPF), NVML's view is still checked
    local nobpf=""
    grep -q '^gputop can trace with BPF' "$OUT/doctor.txt" || nobpf=--no-bpf
    step validate.txt 300 python3 bench/gpu_validate.py --gputop "$gputop" --timeout-s 150 $nobpf \
        --out "$WORK/validate"
    cp "$WORK/validate/results.json" "$OUT/results.json" 2>/dev/null
    echo "## gputop doctor --selftest" >>"$OUT/doctor.txt"
    step doctor.txt 90 "$gputop" doctor --selftest ${cudart:+--cudart "$cudart"}
    step launch.txt 120 python3 bench/gpu_launch_cost.py --gputop "$gputop" --rounds 4 --seconds 6 \
        ${cudart:+--cudart "$cudart"}
    step demo.txt 60 "$gputop" demo -b -n 6
    log "done"
}

case ${1:-} in
    facts) facts; cat "$OUT/facts.txt" ;;
    all) all; cat "$OUT/session.txt" ;;
    *) echo "usage: $0 facts|all" >&2; exit 2 ;;
esac
