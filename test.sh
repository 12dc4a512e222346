#!/usr/bin/env bash
# Install what is missing plus the test bed (idempotent), then run every check and test.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")" && pwd)
cd "$ROOT"
"$ROOT/scripts/setup.sh" --test || exit $?
.venv/bin/ruff check gputop tests bench deploy scripts || exit 1
.venv/bin/mypy gputop || exit 1
.venv/bin/python -m pytest -p no:cacheprovider "$@"
rc=$?
if [ $rc -eq 5 ]; then
    echo "gputop: error: pytest collected no tests" >&2
    echo "hint: the test suite lives in tests/; check that it was not filtered away" >&2
    exit 1
fi
exit $rc
