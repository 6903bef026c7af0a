#!/usr/bin/env bash
# Read throughput by transport: opc.tcp vs opc.wss vs opc.https.
#
# Builds release binaries, starts `uagate run` (temp data dir, opc.tcp and
# the TLS listener on 127.0.0.1 ephemeral ports, self-signed TLS
# certificate), waits for its READY and TLS lines, then runs
# `uagate-bench-transports`: for each transport in turn SESSIONS sessions
# (each on its own connection) loop Read(10 ns0 nodes) back-to-back, one
# outstanding request per session; WARMUP s discarded, SECS s measured. The
# client pins the server's TLS certificate (<data>/tls/cert.pem).
# One server per repetition; odd repetitions run tcp,wss,https, even ones
# the reverse order (to expose order effects).
# Prints a Markdown table per run; raw JSON lines go to $OUT/results.jsonl.
#
# Usage: bench/run-transports.sh [SECS]   (default 10)
# Env:   SESSIONS=16  WARMUP=2  REPEAT=1  TRANSPORTS=tcp,wss,https
#        PIN=split (server CPU 0, client CPU 1; PIN=none runs unpinned)
#        CLIENT_ARGS=  OUT=<dir for logs and results> (default: new temp dir)
# This is a measurement, not a test: nothing here asserts on timings.
set -euo pipefail

SECS="${1:-10}"
SESSIONS="${SESSIONS:-16}"
WARMUP="${WARMUP:-2}"
REPEAT="${REPEAT:-1}"
TRANSPORTS="${TRANSPORTS:-tcp,wss,https}"
CLIENT_ARGS="${CLIENT_ARGS:-}"
# CPU pinning: by default the server gets CPU 0 and the client CPU 1, so the
# server's CPU is the contended resource instead of client and server
# competing for both cores. PIN=none runs unpinned.
if [ "${PIN:-split}" = split ] && command -v taskset >/dev/null && [ "$(nproc)" -ge 2 ]; then
    SERVER_PIN="taskset -c 0"
    CLIENT_PIN="taskset -c 1"
    PINNING="server CPU 0, client CPU 1"
else
    SERVER_PIN=""
    CLIENT_PIN=""
    PINNING="unpinned"
fi
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
OUT="${OUT:-$(mktemp -d /tmp/uagate-transports.XXXXXX)}"
mkdir -p "$OUT"
CLK_TCK="$(getconf CLK_TCK 2>/dev/null || echo 100)"

echo "building release binaries..." >&2
(cd "$ROOT" && cargo build --release -p uagate --bin uagate >&2)
(cd "$ROOT" && cargo build --release -p uagate-bench --bin uagate-bench-transports >&2)
BIN="$ROOT/target/release"

SERVER_PID=""
cleanup() {
    if [ -n "$SERVER_PID" ]; then
        kill "$SERVER_PID" 2>/dev/null || true
        wait "$SERVER_PID" 2>/dev/null || true
        SERVER_PID=""
    fi
}
trap cleanup EXIT INT TERM

RESULTS="$OUT/results.jsonl"
: >"$RESULTS"
LOAD0="$(cut -d' ' -f1-3 /proc/loadavg)"
for rep in $(seq 1 "$REPEAT"); do
    cell="$OUT/run.$rep"
    mkdir -p "$cell"
    cat >"$cell/uagate.toml" <<EOF
[listen]
opc_tcp = "127.0.0.1:0"

[server]
application_name = "uagate-transports"
max_session_count = 100
max_channel_count = 110
EOF
    "$BIN/uagate" --data "$cell/data" config import "$cell/uagate.toml" >&2
    RUST_LOG="${RUST_LOG:-warn}" $SERVER_PIN "$BIN/uagate" --data "$cell/data" run \
        >"$cell/uagate.out" 2>"$cell/uagate.err" &
    SERVER_PID=$!
    tcp="" wss="" https=""
    for _ in $(seq 1 600); do
        tcp="$(sed -n 's/^READY opc.tcp=//p' "$cell/uagate.out" 2>/dev/null | head -n1)"
        wss="$(sed -n 's/^TLS opc.wss=\([^ ]*\) .*/\1/p' "$cell/uagate.out" 2>/dev/null | head -n1)"
        https="$(sed -n 's/^TLS .*opc.https=\([^ ]*\).*/\1/p' "$cell/uagate.out" 2>/dev/null | head -n1)"
        [ -n "$tcp" ] && [ -n "$wss" ] && [ -n "$https" ] && break
        kill -0 "$SERVER_PID" 2>/dev/null || { cat "$cell/uagate.err" >&2; exit 1; }
        sleep 0.1
    done
    [ -n "$tcp" ] && [ -n "$wss" ] && [ -n "$https" ] \
        || { echo "uagate did not print READY and TLS lines in 60 s" >&2; exit 1; }
    order="$TRANSPORTS"
    if [ $((rep % 2)) -eq 0 ]; then
        order="$(echo "$TRANSPORTS" | tr ',' '\n' | tac | paste -sd, -)"
    fi
    echo "run $rep: $tcp $wss $https, order $order, $PINNING" >&2
    if ! $CLIENT_PIN "$BIN/uagate-bench-transports" \
        --tcp-url "$tcp" --wss-url "$wss" --https-url "$https" \
        --cert "$cell/data/tls/cert.pem" --sessions "$SESSIONS" \
        --secs "$SECS" --warmup "$WARMUP" --transports "$order" \
        --server-pid "$SERVER_PID" --clk-tck "$CLK_TCK" --label "run$rep" $CLIENT_ARGS \
        >"$cell/result.txt" 2>"$cell/bench.err"; then
        echo "  FAILED: $(tail -n 3 "$cell/bench.err" | tr '\n' ' ')" >&2
    fi
    grep '^{' "$cell/result.txt" >>"$RESULTS" || true
    grep -v '^{' "$cell/result.txt" >&2 || true
    [ -s "$cell/bench.err" ] && { echo "client stderr:" >&2; head -n 20 "$cell/bench.err" >&2; }
    cleanup
    if grep -qiE 'error|panick' "$cell/uagate.err"; then
        echo "server log has errors/warnings (first 10 lines of $cell/uagate.err):" >&2
        grep -iE 'error|panick|warn' "$cell/uagate.err" | head -n 10 >&2
    fi
done
LOAD1="$(cut -d' ' -f1-3 /proc/loadavg)"

python3 - "$RESULTS" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
tcp = {r["label"]: r["req_per_s"] for r in rows if r["transport"] == "opc.tcp" and r["req_per_s"] > 0}
print("| run | transport | req/s | p50 ms | p99 ms | server CPU s | server CPU µs/req | client CPU s | errors | ratio to tcp |")
print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
f = lambda v: "n/a" if v is None else f"{v}"
for r in sorted(rows, key=lambda r: (r["label"], ["opc.tcp", "opc.wss", "opc.https"].index(r["transport"]))):
    t = tcp.get(r["label"])
    ratio = f"{r['req_per_s'] / t:.2f}" if t else "n/a"
    print(f"| {r['label']} | {r['transport']} | {r['req_per_s']:.0f} | {r['p50_us']/1000:.2f} | "
          f"{r['p99_us']/1000:.2f} | {f(r['server_cpu_s'])} | {f(r['server_cpu_us_per_req'])} | "
          f"{f(r['client_cpu_s'])} | {r['errors']} | {ratio} |")
PY
echo
echo "Pinning: $PINNING. Load average (1/5/15 min) before: $LOAD0, after: $LOAD1."
echo "Raw results: $RESULTS"
