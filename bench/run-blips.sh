#!/usr/bin/env bash
# Network blips and field server restarts seen by a northbound subscriber
# (issue 17): values lost per blip, duplicates, gap markers and the time to
# the first value after the outage. See bench/blips.py.
#
# Usage: bench/run-blips.sh [EVENTS] [DOWN_SECS]      (default 10 2)
# Env:   BIN_DIR=dir with uagate and opcua-ref-server (default: build release)
#        REF_BIN_DIR=dir of opcua-ref-server when it differs (e.g. measuring an
#        older uagate built in a worktree)
#        SCENARIOS="blip restart" (also: expire)  LABEL=text  UP=4 (seconds
#        between events)  COUNTER_MS=100  SESSION_TIMEOUT=2 (expire: the field
#        session's timeout in seconds; DOWN should be longer)
#        FIELD_SECURITY=sign_and_encrypt|none (expire; none: anonymous over
#        None, whose subscriptions cannot be transferred)
set -euo pipefail
EVENTS="${1:-10}"
DOWN="${2:-2}"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
OUT="${OUT:-$(mktemp -d /tmp/uagate-blips.XXXXXX)}"
. "$ROOT/bench/lib.sh"
release_bins -p uagate -p uagate-bench
REF="${REF_BIN_DIR:-$BIN}/opcua-ref-server"
PY="${PYTHON:-$ROOT/.venv/bin/python}"
echo "| build | scenario | events x outage | values lost per event | duplicates | gap markers | first value after (median s) | (max s) |"
echo "|---|---|---|---|---|---|---|---|"
for s in ${SCENARIOS:-blip restart}; do
    "$PY" "$ROOT/bench/blips.py" --uagate "$BIN/uagate" --ref-server "$REF" --scenario "$s" \
        --events "$EVENTS" --down "$DOWN" --up "${UP:-4}" --counter-ms "${COUNTER_MS:-100}" --session-timeout "${SESSION_TIMEOUT:-2}" \
        --field-security "${FIELD_SECURITY:-sign_and_encrypt}" \
        --label "${LABEL:-$(cd "$ROOT" && git rev-parse --short HEAD)}" >"$OUT/$s.out"
    grep '^|' "$OUT/$s.out"
    grep '^{' "$OUT/$s.out" >>"$OUT/blips.jsonl"
done
echo "raw: $OUT/blips.jsonl" >&2
