#!/usr/bin/env bash
# A dead PLC blocks nobody (issue 17 item 3): Read latency of a healthy
# field server's node and of a local node through the gateway, idle and
# while POLLERS sessions poll a dead field server's node back to back.
#
# Field servers: `uagate sim` (healthy, "line1") and `opcua-ref-server`
# ("line2"), which is killed once the gateway has connected to it (its
# namespace is known, its link reconnects). The gateway runs with
# THREADS execution slots (max_request_thread_count), so that without
# parking the pollers alone would hold every slot. Each poller Read waits
# for line2 until its deadline (0.9 x the timeout hint) and gets
# BadNoCommunication.
#
# Usage: bench/run-deadplc.sh [SECS]      (default 10)
# Env:   BIN_DIR (default: build release), POLLERS=50, THREADS=8, SESSIONS=4
set -euo pipefail
SECS="${1:-10}"
POLLERS="${POLLERS:-50}"
THREADS="${THREADS:-8}"
SESSIONS="${SESSIONS:-4}"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
OUT="${OUT:-$(mktemp -d /tmp/uagate-deadplc.XXXXXX)}"
. "$ROOT/bench/lib.sh"
release_bins -p uagate -p uagate-bench
PKI="$OUT/client-pki"
CLIENT_CERT="$("$BIN/uagate-bench" --pki "$PKI" --init-pki)"

RUST_LOG=warn start sim "$BIN/uagate" sim --listen 127.0.0.1:0 --pki "$OUT/sim-pki"
SIM_URL=$STARTED_URL
RUST_LOG=warn start ref "$BIN/opcua-ref-server" --listen 127.0.0.1:0 --pki "$OUT/ref-pki"
REF_PID=$STARTED_PID
REF_URL=$STARTED_URL

DATA="$OUT/uagate-data"
cat >"$OUT/uagate.toml" <<EOT
[listen]
opc_tcp = "127.0.0.1:0"

[server]
max_session_count = 150
max_channel_count = 160
max_request_thread_count = $THREADS

[[field_servers]]
name = "line1"
endpoints = ["$SIM_URL"]
security_mode = "none"
security_policy = "None"

[[field_servers]]
name = "line2"
endpoints = ["$REF_URL"]
security_mode = "none"
security_policy = "None"
EOT
"$BIN/uagate" --data "$DATA" config import "$OUT/uagate.toml" >&2
"$BIN/uagate" --data "$DATA" trust add "$CLIENT_CERT" >&2
RUST_LOG=warn start gateway "$BIN/uagate" --data "$DATA" run
GW_URL=$STARTED_URL

bench() { # LABEL ARGS...
    local label="$1"
    shift
    "$BIN/uagate-bench" --endpoint "$GW_URL" --pki "$PKI" --warmup 2 --label "$label" "$@"
}
# Both field connections serve (line2's namespace becomes known).
for _ in $(seq 1 30); do
    if bench probe --sessions 1 --duration 1 --warmup 0 --node "nsu=urn:uagate:sim;s=Simulation.Setpoint" \
        --node "nsu=urn:uagate:bench:ref-server;s=Bench.Counter" >/dev/null 2>&1; then
        break
    fi
    sleep 1
done

measure() { # PHASE
    for target in healthy local; do
        case $target in
        healthy) node="nsu=urn:uagate:sim;s=Simulation.Setpoint" ;;
        local) node="i=2258" ;;
        esac
        bench "$1/$target" --sessions "$SESSIONS" --duration "$SECS" --node "$node" | tee -a "$OUT/deadplc.jsonl"
    done
}
measure idle
kill "$REF_PID"
sleep 2
"$BIN/uagate-bench" --endpoint "$GW_URL" --pki "$PKI" --sessions "$POLLERS" --any-status \
    --warmup 0 --duration $((SECS * 2 + 20)) --label pollers \
    --node "nsu=urn:uagate:bench:ref-server;s=Bench.Counter" >"$OUT/pollers.json" 2>"$OUT/pollers.err" &
POLL_PID=$!
PIDS+=("$POLL_PID")
sleep 5
measure "dead-plc-x$POLLERS"
wait "$POLL_PID" || true
cat "$OUT/pollers.json"
echo "raw: $OUT/deadplc.jsonl" >&2
