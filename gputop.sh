#!/usr/bin/env bash
# Install what is missing (idempotent), then run gputop with the given arguments.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")" && pwd)
"$ROOT/scripts/setup.sh"
exec "$ROOT/.venv/bin/gputop" "$@"
