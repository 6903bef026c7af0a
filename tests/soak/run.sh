#!/usr/bin/env bash
# The ten-minute soak of CI (issue 21 item 2): bench/soak.py against the test
# build's gateway (debug), with a fault every 30 s, so every fault kind
# (field server restart, stall, dropped connections, TLS certificate
# replaced) comes round five times. Fails when any of the soak's checks
# fails: growth of RSS, file descriptors or threads after the warm-up,
# leaked sessions, items or southbound connections, a field connection that
# does not recover, a counter gap without a gap marker. The one-hour run is
# bench/run-soak.sh.
#
# Usage: tests/soak/run.sh [MINUTES]   (default 10)
# Env:   FAULT_EVERY=30  OUT=<dir for samples.csv, summary.json, soak.log>
set -euo pipefail
MINUTES="${1:-10}"
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$ROOT"
OUT="${OUT:-target/test-output/soak}"
mkdir -p "$OUT"
# The field server and the wss/https client; the test build did not need them. Built together
# with the gateway, whose dependencies' features are the test build's (see the feature-alignment
# dependencies in Cargo.toml), so that they reuse every crate the test build compiled.
cargo build -q -p uagate -p uagate-bench --bin uagate --bin opcua-ref-server --bin uagate-bench-transports
BIN="${CARGO_TARGET_DIR:-target}/debug"
status=0
.venv/bin/python bench/soak.py --uagate "$BIN/uagate" --ref-server "$BIN/opcua-ref-server" \
    --transports-bench "$BIN/uagate-bench-transports" --minutes "$MINUTES" \
    --fault-every "${FAULT_EVERY:-30}" --csv "$OUT/samples.csv" \
    >"$OUT/summary.json" 2>"$OUT/soak.log" || status=$?
.venv/bin/python - "$OUT/summary.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
for k in ("rss_kib_min_max_after_warmup", "fds_min_max_after_warmup", "threads_min_max_after_warmup",
          "counts", "sequences", "counters", "faults", "baseline", "end", "errors"):
    print(f"{k}: {json.dumps(s[k])}")
print("soak FAILED:" if s["failed"] else "soak: all checks passed", *s["failed"], sep="\n  ")
PY
exit "$status"
