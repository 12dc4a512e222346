#!/usr/bin/env bash
# Idempotent set-up for a Debian 11+ / Ubuntu 22.04+ host, run as root (Debian 11, 12, 13: tests/matrix).
#   scripts/setup.sh          system packages gputop needs + .venv with gputop installed
#   scripts/setup.sh --test   the same, plus test tools and the GPU-less test bed
#   scripts/setup.sh --torch  --test's, plus the default PyTorch wheel in .cache/torch (./test.sh --torch)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
MODE=run
TORCH=0
[ "${1:-}" = "--test" ] && MODE=test
[ "${1:-}" = "--torch" ] && MODE=test && TORCH=1

say() { echo "setup: $*" >&2; }
if [ "$(id -u)" -ne 0 ]; then
    echo "gputop: error: set-up installs system packages and needs root" >&2
    echo "hint: run it with sudo" >&2
    exit 77
fi
export DEBIAN_FRONTEND=noninteractive

installed() { [ "$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null)" = "install ok installed" ]; }
APT_UPDATED=0
apt_update_once() { [ $APT_UPDATED = 1 ] || { say "apt-get update"; apt-get -q update >/dev/null; APT_UPDATED=1; }; }
# package lists younger than a day are trusted as they are; older or missing ones are refreshed once
lists_fresh() { [ -n "$(find /var/lib/apt/lists -maxdepth 1 -name '*_Packages*' -mmin -1440 2>/dev/null | head -n1)" ]; }
has_candidate() {
    lists_fresh || apt_update_once
    [ -n "$(apt-cache policy "$1" 2>/dev/null | awk '/Candidate:/ {print $2}' | grep -v '(none)')" ]
}

want=(bpfcc-tools python3-bpfcc binutils llvm gcc libc6-dev)
[ $MODE = test ] && want+=(tmux debian-archive-keyring util-linux e2fsprogs prometheus systemd podman runc debootstrap qemu-system-x86 nginx-light zsh fish groff-base gcc-aarch64-linux-gnu libc6-dev-arm64-cross)
# The venv's interpreter: the distro's python3, the one python3-bpfcc is built for and every user can run
# (the first python3 on root's PATH may be a pyenv or conda one under /root, mode 0700: a venv built on it
# runs for root alone). Another python3 only where the distro has none.
PY=/usr/bin/python3
[ -x "$PY" ] || PY=$(command -v python3)
"$PY" -c 'import venv, ensurepip' 2>/dev/null || want+=(python3-venv)
missing=()
for p in "${want[@]}"; do installed "$p" || missing+=("$p"); done

# Kernel headers for bcc: the exact package when the distro has it, else the distro's
# newest headers (gputop then points bcc at them, see gputop/sources/bpf/program/kheaders.py).
KREL=$(uname -r)
if [ ! -e "/lib/modules/$KREL/build/include" ] && ! installed "linux-headers-$KREL"; then
    if has_candidate "linux-headers-$KREL"; then
        missing+=("linux-headers-$KREL")
    elif ls /usr/src/linux-headers-*/Makefile >/dev/null 2>&1; then
        :   # the distro's headers for another kernel are installed: gputop falls back to them
    else
        meta=""
        for m in linux-headers-amd64 linux-headers-cloud-amd64 linux-headers-generic linux-headers-arm64 linux-headers-virtual; do
            if installed "$m"; then meta=""; break; fi
            if [ -z "$meta" ] && has_candidate "$m"; then meta=$m; fi
        done
        if [ -n "$meta" ]; then
            say "no linux-headers-$KREL in the distro; installing $meta (nearest headers, used as a fallback)"
            missing+=("$meta")
        fi
    fi
fi
if [ ${#missing[@]} -gt 0 ]; then
    apt_update_once
    say "apt-get install ${missing[*]}"
    # the tests start their own Prometheus and nginx on loopback: the packages' services are not started
    no_start=0
    if [[ " ${missing[*]} " == *" prometheus "* || " ${missing[*]} " == *" nginx-light "* ]] && [ ! -e /usr/sbin/policy-rc.d ]; then
        printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d && no_start=1
    fi
    apt-get -q install -y --no-install-recommends "${missing[@]}" >/dev/null
    [ $no_start = 0 ] || rm -f /usr/sbin/policy-rc.d
fi

# --- the venv --------------------------------------------------------------------------
VENV="$ROOT/.venv"
# a directory (or file) on PATH's way that users other than root cannot search (or run): none when all can
unreachable() {
    local p=$1
    while [ -n "$p" ] && [ "$p" != / ]; do
        [ "$(( 0$(stat -L -c %a "$p") & 01 ))" -ne 0 ] || { echo "$p"; return; }
        p=$(dirname "$p")
    done
}
home=$(sed -n 's/^home = //p' "$VENV/pyvenv.cfg" 2>/dev/null || true)
if [ -x "$VENV/bin/python" ] && [ -n "$home" ] && [ "$home" != "$(dirname "$(readlink -f "$PY")")" ] \
    && [ -n "$(unreachable "$(readlink -f "$VENV/bin/python")")" ]; then
    # an earlier set-up built it on an interpreter other users cannot reach: built again on $PY
    say "rebuilding $VENV on $PY ($(readlink -f "$VENV/bin/python") cannot be run by users other than root)"
    rm -rf "$VENV"
fi
if [ ! -x "$VENV/bin/python" ]; then
    say "creating $VENV with $PY"
    "$PY" -m venv "$VENV"
fi
if blocked=$(unreachable "$(readlink -f "$VENV/bin/python")") && [ -n "$blocked" ]; then
    say "note: users other than root cannot run $VENV/bin/gputop: $blocked is not searchable by them"
elif blocked=$(unreachable "$VENV/bin") && [ -n "$blocked" ]; then
    say "note: users other than root cannot run $VENV/bin/gputop: $blocked is not searchable by them (clone gputop where they can reach it, e.g. /opt/gputop)"
fi
# An editable install from pyproject.toml alone (PEP 660) needs pip 21.3+; the venv gets the
# distro's pip (Debian 11: 20.3, which wants a setup.py): that one is upgraded inside the venv first.
if ! "$VENV/bin/python" -c 'import sys, pip; sys.exit(tuple(map(int, pip.__version__.split(".")[:2])) < (21, 3))' \
    2>/dev/null; then
    say "upgrading pip in $VENV ($("$VENV/bin/python" -m pip --version 2>/dev/null | cut -d' ' -f2) cannot install editable from pyproject.toml)"
    log=$(mktemp)
    if ! "$VENV/bin/python" -m pip install -q --disable-pip-version-check --upgrade "pip>=21.3" >"$log" 2>&1; then
        grep -v '^WARNING: Location' "$log" >&2
        rm -f "$log"
        echo "gputop: error: upgrading pip in $VENV failed" >&2
        echo "hint: see pip's output above; gputop needs pip 21.3+ in the venv" >&2
        exit 1
    fi
    rm -f "$log"
fi
# the test bed and the OTLP receiver (network and unpacking: about a minute on a fresh clone) are fetched
# while gputop installs into the venv (CPU); testbed.sh uses only the venv's pip, for `pip download`
TESTBED_PID=""
OTLP_PID=""
if [ $MODE = test ]; then
    "$ROOT/scripts/testbed.sh" &
    TESTBED_PID=$!
    trap 'kill $TESTBED_PID $OTLP_PID 2>/dev/null' EXIT
    # a real OTLP receiver for tests/unit/test_otlp.py (Debian's victoria-metrics; its tests skip without it)
    python3 "$ROOT/scripts/otlp_receiver.py" "$ROOT/.cache/otlp/apt" "$ROOT/.cache/otlp" &
    OTLP_PID=$!
fi
extra=""
# the tests need the OTLP extra too (gputop exporter --otlp-endpoint; tests/unit/test_otlp.py)
[ $MODE = test ] && extra="[test,otlp]"
stamp="$VENV/.gputop-installed$extra"
sum=$(cat "$ROOT/pyproject.toml" "$ROOT/requirements.lock" | sha256sum | cut -c1-16)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$sum" ]; then
    say "installing gputop$extra into $VENV"
    log=$(mktemp)
    # the distribution was called "gputop" before it took a name of its own on the package index: the
    # old one's metadata and script would stay beside the new one's
    if "$VENV/bin/python" -m pip show -q gputop >/dev/null 2>&1; then
        "$VENV/bin/python" -m pip uninstall -q -y gputop >/dev/null 2>&1 || true
    fi
    # the versions the suite passed with (requirements.lock), within pyproject.toml's ranges
    if ! "$VENV/bin/python" -m pip install -q --disable-pip-version-check -c "$ROOT/requirements.lock" \
        -e "$ROOT$extra" >"$log" 2>&1 \
        || ! (cd / && "$VENV/bin/python" -c 'import gputop.cli'); then
        grep -v '^WARNING: Location' "$log" >&2
        rm -f "$log"
        echo "gputop: error: installing gputop into $VENV failed" >&2
        echo "hint: see pip's output above" >&2
        exit 1
    fi
    rm -f "$log"
    echo "$sum" > "$stamp"
fi

if [ -n "$TESTBED_PID" ]; then
    wait "$TESTBED_PID" || { rc=$?; wait "$OTLP_PID" || true; exit $rc; }
    wait "$OTLP_PID" || say "warning: no OTLP receiver fetched; the OTLP tests skip"
    trap - EXIT
fi

# the default torch wheel as users install it (a CUDA build, several GB; this host's pip settings may
# prefer a CPU-only build: they are left out), into a venv of its own, once
if [ $TORCH = 1 ] && ! "$ROOT/.cache/torch/bin/python" -c 'import torch' >/dev/null 2>&1; then
    say "installing the default torch wheel into $ROOT/.cache/torch (several GB, once)"
    "$PY" -m venv "$ROOT/.cache/torch"
    if ! PIP_CONFIG_FILE=/dev/null "$ROOT/.cache/torch/bin/python" -m pip install -q --disable-pip-version-check \
        torch; then
        echo "gputop: error: installing torch into $ROOT/.cache/torch failed" >&2
        echo "hint: see pip's output above; the PyTorch tier needs the package index and about 6 GB of disk" >&2
        exit 1
    fi
fi
