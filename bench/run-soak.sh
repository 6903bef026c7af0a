#!/usr/bin/env bash
# Soak (issue 21 item 2): uagate under mixed load for MINUTES while a fault
# injector restarts, stalls and cuts off its field server and replaces its
# TLS certificate. Samples RSS, file descriptors, threads, sessions,
# monitored items, field state and southbound connections every 10 s and
# checks that nothing grows, leaks or loses data unreported (see
# bench/soak.py). Not part of the tests; its ten-minute version runs in CI
# (tests/soak/run.sh, from scripts/test.sh).
#
# Usage: bench/run-soak.sh [MINUTES]       (default 60)
# Env:   BIN_DIR=dir with uagate, opcua-ref-server and uagate-bench-transports
#        (default: build release)   FAULT_EVERY=60 (seconds between faults)
#        OUT=<dir for the samples and summary>  (default: a new temp dir)
# Exit status 1 when a check failed (the summary's "failed" says which).
set -euo pipefail
MINUTES="${1:-60}"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
OUT="${OUT:-$(mktemp -d /tmp/uagate-soak.XXXXXX)}"
mkdir -p "$OUT"
. "$ROOT/bench/lib.sh"
release_bins -p uagate -p uagate-bench
PY="${PYTHON:-$ROOT/.venv/bin/python}"
echo "soak: $MINUTES min, a fault every ${FAULT_EVERY:-60} s; samples in $OUT/samples.csv" >&2
status=0
"$PY" "$ROOT/bench/soak.py" --uagate "$BIN/uagate" --ref-server "$BIN/opcua-ref-server" \
    --transports-bench "$BIN/uagate-bench-transports" --minutes "$MINUTES" \
    --fault-every "${FAULT_EVERY:-60}" --csv "$OUT/samples.csv" \
    >"$OUT/summary.json" 2>"$OUT/soak.log" || status=$?
"$PY" - "$OUT/summary.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
print(f"minutes {s['minutes']}, samples {s['samples']}")
for k in ("rss_kib_min_max_after_warmup", "fds_min_max_after_warmup", "threads_min_max_after_warmup"):
    print(f"{k}: {s[k]}")
print("counts:", json.dumps(s["counts"]))
print("counters:", json.dumps(s["counters"]))
print("sequences:", json.dumps(s["sequences"]))
print("faults:", json.dumps(s["faults"]))
print("baseline:", json.dumps(s["baseline"]))
print("end:", json.dumps(s["end"]))
if s["errors"]:
    print("errors (first 50):", *s["errors"], sep="\n  ")
print("FAILED:" if s["failed"] else "all checks passed", *s["failed"], sep="\n  ")
PY
exit "$status"
