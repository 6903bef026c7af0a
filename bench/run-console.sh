#!/usr/bin/env bash
# Console latency while the data plane is saturated.
#
# A fresh `uagate run` (release build, temp data dir, loopback) with the
# fairness benchmark's flood configuration (balanced profile, 4 shared
# execution slots + reserves, so requests always queue). The console probe
# (bench/console_latency.py: dashboard, partial refresh, limits, fields,
# REST status and plan, one keep-alive HTTPS connection, 50 ms between
# requests) runs twice: on the idle gateway, then while
# `uagate-bench-fairness` floods it with A (8 sessions) + B (32 sessions)
# back-to-back Reads. The server is pinned to CPU 0, the flood and the probe
# to CPU 1 (PIN=none: unpinned). Prints a Markdown table.
#
# Usage: bench/run-console.sh [SECONDS]   (default 20)
# Env:   A_SESSIONS=8 B_SESSIONS=32 SLOTS=4 OUT=<dir>
# This is a measurement, not a test: nothing here asserts on timings.
set -euo pipefail

SECS="${1:-20}"
A_SESSIONS="${A_SESSIONS:-8}"
B_SESSIONS="${B_SESSIONS:-32}"
SLOTS="${SLOTS:-4}"
if [ "${PIN:-split}" = split ] && command -v taskset >/dev/null && [ "$(nproc)" -ge 2 ]; then
    SERVER_PIN="taskset -c 0"
    CLIENT_PIN="taskset -c 1"
else
    SERVER_PIN=""
    CLIENT_PIN=""
fi
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
OUT="${OUT:-$(mktemp -d /tmp/uagate-console.XXXXXX)}"
mkdir -p "$OUT"
PY="${PYTHON:-python3}"

echo "building release binaries..." >&2
(cd "$ROOT" && cargo build --release -p uagate --bin uagate >&2)
(cd "$ROOT" && cargo build --release -p uagate-bench --bin uagate-bench-fairness >&2)
BIN="$ROOT/target/release"

# Background processes stopped on exit, and `start` (waits for READY).
. "$ROOT/bench/lib.sh"

cat >"$OUT/uagate.toml" <<CFG
[listen]
opc_tcp = "127.0.0.1:0"

[server]
application_name = "uagate-console-bench"
max_session_count = $((A_SESSIONS + B_SESSIONS + 10))
max_channel_count = $((A_SESSIONS + B_SESSIONS + 20))
max_request_thread_count = $((SLOTS + 3))
max_queued_request_count = 100

[isolation]
mode = "balanced"
CFG
"$BIN/uagate" --data "$OUT/data" config import "$OUT/uagate.toml" >&2
printf 'bench-console-pass\n' | "$BIN/uagate" --data "$OUT/data" user add bench --role viewer >&2
RUST_LOG="${RUST_LOG:-warn}" start uagate $SERVER_PIN "$BIN/uagate" --data "$OUT/data" run
SERVER_PID=$STARTED_PID
url=$STARTED_URL
console=""
for _ in $(seq 1 100); do
    console="$(sed -n 's/^CONSOLE //p' "$OUT/uagate.out" | head -n1)"
    [ -n "$console" ] && break
    sleep 0.1
done
[ -n "$console" ] || { echo "uagate printed no CONSOLE line" >&2; exit 1; }
CA="$OUT/data/tls/cert.pem"
probe() { $CLIENT_PIN "$PY" "$ROOT/bench/console_latency.py" "$console" "$CA" bench bench-console-pass "$SECS" "$1"; }

echo "idle probe ($SECS s) against $console" >&2
probe idle >"$OUT/idle.json"
echo "flood: A=$A_SESSIONS + B=$B_SESSIONS sessions against $url" >&2
$CLIENT_PIN "$BIN/uagate-bench-fairness" --endpoint "$url" \
    --a-sessions "$A_SESSIONS" --b-sessions "$B_SESSIONS" \
    --solo 1 --together $((SECS + 6)) --warmup 1 --label flood \
    --server-pid "$SERVER_PID" --clk-tck "$(getconf CLK_TCK 2>/dev/null || echo 100)" \
    >"$OUT/flood.json" 2>"$OUT/flood.err" &
FLOOD_PID=$!
PIDS+=("$FLOOD_PID")
# Past the flood's solo phase and warm-up: both owners are flooding.
sleep 4
probe flood >"$OUT/flooded.json"
wait "$FLOOD_PID" || { echo "flood client failed: $(tail -n 3 "$OUT/flood.err")" >&2; }

"$PY" - "$OUT/idle.json" "$OUT/flooded.json" "$OUT/flood.json" <<'PY'
import json, sys
idle, flooded = (json.loads(open(p).read()) for p in sys.argv[1:3])
try:
    flood = json.loads(open(sys.argv[3]).read())
    rate = flood["together_a"]["req_per_s"] + flood["together_b"]["req_per_s"]
    rejected = flood["together_a"]["errors"] + flood["together_b"]["errors"]
    cpu = flood.get("server_cpu_s_together")
    secs = flood.get("together_s")
    busy = f", server CPU {100 * cpu / secs:.0f} % of one core" if cpu is not None and secs else ""
    note = f"{rate:.0f} Read/s, {rejected} refused{busy}"
except Exception:
    note = "n/a"
print("| data plane | console requests | p50 ms | p90 ms | p99 ms | max ms | errors |")
print("|---|---:|---:|---:|---:|---:|---:|")
for r, what in ((idle, "idle"), (flooded, f"flooded ({note})")):
    print(f"| {what} | {r['requests']} | {r['p50_ms']} | {r['p90_ms']} | {r['p99_ms']} | {r['max_ms']} | {r['errors']} |")
PY
echo
echo "Logs and raw results: $OUT"
