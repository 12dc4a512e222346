#!/usr/bin/env bash
# Install what is missing plus the test bed (idempotent), then run every check and test.
#   ./test.sh [PYTEST ARGS]   the whole suite (what CI runs)
#   ./test.sh --quick         the inner loop: lint, types, unit and UI tests, a few BPF smoke tests
set -uo pipefail
ROOT=$(cd "$(dirname "$0")" && pwd)
cd "$ROOT"
"$ROOT/scripts/setup.sh" --test || exit $?
.venv/bin/ruff check gputop tests bench deploy scripts || exit 1
.venv/bin/mypy gputop || exit 1
if [ "${1:-}" = "--quick" ]; then
    shift
    set -- tests/unit tests/ui \
        tests/bpf/test_counts.py::test_runtime_calling_driver_counts_once \
        tests/bpf/test_driver_layer.py::test_application_reaches_the_layer_by_dlsym \
        tests/bpf/test_batch.py::test_batch_json_exact_counts_and_exit "$@"
fi
.venv/bin/python -m pytest -p no:cacheprovider "$@"
rc=$?
if [ $rc -eq 5 ]; then
    echo "gputop: error: pytest collected no tests" >&2
    echo "hint: the test suite lives in tests/; check that it was not filtered away" >&2
    exit 1
fi
exit $rc
