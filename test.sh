#!/usr/bin/env bash
# Install what is missing plus the test bed (idempotent), then run every check and test.
#   ./test.sh [PYTEST OPTIONS]        the whole suite (what CI runs): the tiers below, each given the options
#   ./test.sh TESTS... [PYTEST ARGS]  the tests named (paths, node ids), in one pytest, as given
#   ./test.sh --quick [PYTEST ARGS]   the inner loop: lint, types, unit and UI tests, a few BPF smoke tests
#   ./test.sh --torch [PYTEST ARGS]   on demand: kernel names with the default PyTorch wheel (tests/torch;
#                                     several GB, installed once into .cache/torch)
# The whole suite's tiers (docs/architecture.md, "Test bed and test tiers"), for 2 CPUs:
#   1. CPU-bound: unit and artefacts tests, two pytest-xdist workers a CPU, beside the kernel matrix's suite
#      on this machine's kernel (bullseye-on-host) and the container image's build; then the tests
#      marked serial (CPU shares), alone;
#   2. mostly waiting: the BPF and end-to-end tests, one at a time and alone in their kind (they count
#      probes, descriptors and CUDA processes host-wide), beside the matrix's QEMU guests (a CPU each)
#      and the UI tests, niced; then those of them marked serial (wall-clock bounds), alone.
# GPUTOP_TEST_JOBS sets the workers (default: the CPUs, twice that for the unit tests); GPUTOP_MATRIX=0 leaves the matrix out.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")" && pwd)
cd "$ROOT"
# --torch: the test set-up and the torch wheel (setup.sh --torch does both)
"$ROOT/scripts/setup.sh" "$([ "${1:-}" = "--torch" ] && echo --torch || echo --test)" || exit $?
.venv/bin/ruff check gputop tests bench deploy scripts || exit 1
if [ "${1:-}" != "--quick" ]; then
    .venv/bin/mypy gputop || exit 1
fi

PYTEST=(.venv/bin/python -m pytest -p no:cacheprovider)
JOBS=${GPUTOP_TEST_JOBS:-$(nproc)}
PARALLEL=(-n "$JOBS" --dist worksteal)
[ "$JOBS" -gt 1 ] || PARALLEL=(-p no:xdist)
# the unit tests (and the quick tier's UI tests) mostly wait on their servers, pilots and children: two workers a
# CPU where they are the only tests running (here: 1,330 unit tests in 1 min 29 s on 4 workers, about half what 2
# took); the UI tests beside the BPF tier keep one a CPU
WIDE_JOBS=${GPUTOP_TEST_JOBS:-$(( $(nproc) * 2 ))}
WIDE=(-n "$WIDE_JOBS" --dist worksteal)
[ "$WIDE_JOBS" -gt 1 ] || WIDE=(-p no:xdist)

ran=0       # a tier that ran tests (pytest's 5: it collected none)
rc=0        # the first failure's status
BG=()       # tiers running in the background: pid:log

tally() {
    local r=$1
    if [ "$r" -ne 5 ]; then
        ran=1
        [ "$rc" -ne 0 ] || rc=$r
    fi
}

# Expedited RCU grace periods (/sys/kernel/rcu_expedited) while the tiers that attach and detach probes run, beside
# each other: each perf-event uprobe the kernel removes waits for grace periods, one at a time (bench/exit_cost.py:
# 312 probes 35.0 s, expedited 24.9 s), and the BPF tier removes thousands. Timing only: nothing a test asserts
# depends on it. Not while the tests that measure CPU shares or wall-clock bounds run; the value found is put back.
RCU_EXPEDITED=/sys/kernel/rcu_expedited
rcu_was=""
expedite() {
    [ -z "$rcu_was" ] && [ -w "$RCU_EXPEDITED" ] || return 0
    rcu_was=$(cat "$RCU_EXPEDITED" 2>/dev/null) && echo 1 2>/dev/null > "$RCU_EXPEDITED" || rcu_was=""
}
unexpedite() {
    [ -n "$rcu_was" ] || return 0
    echo "$rcu_was" 2>/dev/null > "$RCU_EXPEDITED" || true
    rcu_was=""
}

# Ctrl-C reaches the background tiers too (started with SIGINT at its default: pytest stops cleanly, the
# matrix interrupts its guests); a TERM (CI's time limit) is passed on to them as an INT
stop() {
    local job
    if [ "$1" = TERM ]; then
        for job in "${BG[@]}"; do
            kill -INT "${job%%:*}" 2>/dev/null
        done
    fi
    wait 2>/dev/null
    unexpedite
    for job in "${BG[@]}"; do
        cat "${job#*:}"
        rm -f "${job#*:}"
    done
    exit 130
}
trap 'stop INT' INT
trap 'stop TERM' TERM

# start_bg TITLE CMD...: a tier in the background, its output kept for finish_bg
start_bg() {
    local title=$1 log
    shift
    log=$(mktemp)
    echo "== $title (in the background)"
    # a background job of a script ignores SIGINT, and Python keeps an ignored SIGINT ignored
    { echo "== $title"; exec env --default-signal=INT "$@"; } >"$log" 2>&1 &
    BG+=("$!:$log")
}

# finish_bg: wait for the background tiers, then print what each wrote
finish_bg() {
    local job r
    for job in "${BG[@]}"; do
        wait "${job%%:*}"
        r=$?
        cat "${job#*:}"
        rm -f "${job#*:}"
        tally $r
    done
    BG=()
}

finish() {
    if [ $ran -eq 0 ]; then
        echo "gputop: error: pytest collected no tests" >&2
        echo "hint: the test suite lives in tests/; check that it was not filtered away" >&2
        exit 1
    fi
    exit $rc
}

named=0     # arguments that name tests (paths, node ids): run those, in one pytest
for a in "$@"; do
    case $a in
        -*) ;;
        */*|*.py|*::*) named=1 ;;
        *) [ -e "$a" ] && named=1 ;;
    esac
done

# the UI's snapshot files, whole and in one process: syrupy fails a run for a snapshot no test uses only
# there (not under pytest-xdist, not when tests of the files are deselected)
mapfile -t SNAPSHOTS < <(grep -l snap_compare tests/ui/test_*.py)
NO_SNAPSHOTS=("${SNAPSHOTS[@]/#/--ignore=}")

if [ "${1:-}" = "--quick" ]; then
    shift
    # mypy beside the tests (it reads, they mostly wait on Textual's pilot); the snapshots among the other
    # UI tests (under pytest-xdist syrupy does not check for snapshots no test uses: the whole suite does)
    start_bg "mypy" .venv/bin/mypy gputop
    echo "== unit and UI tests, snapshots included (${WIDE_JOBS} workers)"
    "${PYTEST[@]}" "${WIDE[@]}" -m "not artefacts and not serial" tests/unit tests/ui "$@"
    tally $?
    echo "== the tests that measure CPU shares, alone"
    "${PYTEST[@]}" -m "not artefacts and serial" tests/unit tests/ui "$@"
    tally $?
    echo "== BPF smoke tests"
    "${PYTEST[@]}" tests/bpf/test_counts.py::test_runtime_calling_driver_counts_once \
        tests/bpf/test_driver_layer.py::test_application_reaches_the_layer_by_dlsym \
        tests/bpf/test_batch.py::test_batch_json_exact_counts_and_exit "$@"
    tally $?
    finish_bg
    finish
fi

if [ "${1:-}" = "--torch" ]; then
    shift
    echo "== PyTorch tier: tests/torch"
    GPUTOP_TORCH=1 "${PYTEST[@]}" tests/torch "$@"
    tally $?
    finish
fi

if [ $named -eq 1 ]; then
    "${PYTEST[@]}" "$@"
    tally $?
    finish
fi

# 1. CPU-bound: unit and artefacts tests on every CPU, the matrix's suite on this machine's kernel beside them
expedite
start_bg "kernel matrix: this machine's kernel" nice -n 5 env GPUTOP_MATRIX_PART=host "${PYTEST[@]}" tests/matrix "$@"
# the image of deploy/Containerfile, built for its BPF test (podman's layer cache; the test removes it), unless
# options may leave the test out; a failure is the test's to say
case " $* " in
    *" -k"*|*" -m"*|*" --deselect"*|*" --co "*|*" --collect-only "*|*" -x "*|*" --exitfirst "*) ;;
    *) start_bg "container image, ahead of its test" nice -n 10 sh -c \
           'PYTHONPATH=tests .venv/bin/python tests/bpf/test_container_image.py build >/dev/null 2>&1; true' ;;
esac
echo "== unit and artefacts tests (${WIDE_JOBS} workers)"
"${PYTEST[@]}" "${WIDE[@]}" -m "not serial" tests/unit "$@"
tally $?
finish_bg
unexpedite
echo "== the tests that measure CPU shares, alone"
"${PYTEST[@]}" -m serial tests/unit tests/ui "$@"
tally $?

# 2. mostly waiting: BPF and end to end, alone in their kind (they count probes, descriptors and CUDA
#    processes host-wide), beside what starts no CUDA process and attaches nothing, niced: the QEMU
#    guests, the UI tests (every CPU) and the UI snapshots (one process: syrupy's check for snapshots
#    no test uses)
start_bg "kernel matrix: QEMU guests" nice -n 10 env GPUTOP_MATRIX_PART=guests "${PYTEST[@]}" tests/matrix "$@"
start_bg "UI tests (${JOBS} workers)" nice -n 5 "${PYTEST[@]}" "${PARALLEL[@]}" -m "not serial" "${NO_SNAPSHOTS[@]}" \
    tests/ui "$@"
start_bg "UI snapshots" nice -n 5 "${PYTEST[@]}" "${SNAPSHOTS[@]}" "$@"
case " $* " in
    *" -m"*) BESIDE=() ;;       # the caller's selection: one run, beside the rest
    *) BESIDE=(-m "not serial") ;;
esac
# on demand only, not collected otherwise (docs/deploy.md): the arm64 image, built under emulation for minutes
[ "${GPUTOP_ARM64_IMAGE:-}" = 1 ] || BESIDE+=(--ignore=tests/bpf/test_container_image_arm64.py)
echo "== BPF and end-to-end tests"
expedite
"${PYTEST[@]}" "${BESIDE[@]}" tests/bpf tests/e2e "$@"
tally $?
unexpedite
finish_bg
if [ "${BESIDE[0]:-}" = -m ]; then
    echo "== the BPF and end-to-end tests that measure wall-clock time, alone"
    "${PYTEST[@]}" -m serial "${BESIDE[@]:2}" tests/bpf tests/e2e "$@"
    tally $?
fi
finish
