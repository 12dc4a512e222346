#!/usr/bin/env bash
# The offline bundle in parts, for a channel that carries a limited size at a time (docs/GPU-VALIDATION.md):
#
#   bench/gpu_kit.sh [BUNDLE]        BUNDLE: a gathered bundle (default .cache/offline-bundle, gathered if missing)
#
# Writes $GPUTOP_KIT_DIR/.kit1/, .kit2/, ... (default: this checkout; git ignores them), each holding one
# part of a tar of the bundle (bundle.tar.N, at most $GPUTOP_KIT_PART_MIB MiB, default 48) and PARTS,
# the number of parts. bench/gpu_session.sh puts them together (cat | tar -x) and install.sh checks
# the bundle's SHA256SUMS before it writes anything.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUNDLE=$(realpath -m "${1:-$ROOT/.cache/offline-bundle}")
DEST=${GPUTOP_KIT_DIR:-$ROOT}
PART_MIB=${GPUTOP_KIT_PART_MIB:-48}
if [ ! -f "$BUNDLE/SHA256SUMS" ]; then
    "$ROOT/scripts/offline-bundle.sh" gather "$BUNDLE"
fi
rm -rf "$DEST"/.kit[0-9]*
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
tar -C "$(dirname "$BUNDLE")" --transform "s,^$(basename "$BUNDLE"),gputop-bundle," -cf - "$(basename "$BUNDLE")" |
    split -b "${PART_MIB}M" -d -a 2 - "$tmp/bundle.tar."
n=$(ls "$tmp" | wc -l)
i=1
for part in "$tmp"/bundle.tar.*; do
    mkdir -p "$DEST/.kit$i"
    mv "$part" "$DEST/.kit$i/"
    echo "$n" >"$DEST/.kit$i/PARTS"
    i=$((i + 1))
done
for d in "$DEST"/.kit[0-9]*; do
    echo "$d $(du -sm "$d" | cut -f1) MiB"
done
