#!/usr/bin/env bash
# Two-owner fairness benchmark driver for uagate's resource isolation.
#
# Owner A = 8 sessions from 127.0.0.2, owner B = 32 sessions from 127.0.0.3,
# all looping Read(10 ns0 nodes) back-to-back (one outstanding request per
# session). For each configuration a fresh `uagate run` (release build, temp
# data dir, loopback ephemeral port) is started, `uagate-bench-fairness` runs
# A alone, then A and B together, and the server is stopped. Execution slots
# are kept scarce (shared RequestExecution = 4 everywhere) so both owners
# always have queued requests and the scheduler decides who runs next:
#   shared_only   max_request_thread_count = 4 (FIFO, no owner accounting)
#   fair_share    max_request_thread_count = 4 (weighted fair, weight 1:1)
#   balanced      max_request_thread_count = 7 (= shared 4 + 3 reserves)
#   trusted_w4    trusted_reservations, max_request_thread_count = 7, A is the
#                 trusted owner "a" (ingress 127.0.0.2/32) with weight 4 and no
#                 RequestExecution reservation (shared 4, weights only)
# Prints a Markdown table; raw JSON lines go to $OUT/results.jsonl.
#
# Usage: bench/run-fairness.sh [SOLO_SECS] [TOGETHER_SECS]   (default 10 15)
# Env:   MODES="shared_only fair_share balanced trusted_w4"  WARMUP=2
#        A_SESSIONS=8 B_SESSIONS=32  SLOTS=4 (shared execution slots)
#        REPEAT=1  OUT=<dir for logs and results> (default: a new temp dir)
# This is a measurement, not a test: nothing here asserts on timings.
set -euo pipefail

SOLO="${1:-10}"
TOGETHER="${2:-15}"
MODES="${MODES:-shared_only fair_share balanced trusted_w4}"
WARMUP="${WARMUP:-2}"
A_SESSIONS="${A_SESSIONS:-8}"
B_SESSIONS="${B_SESSIONS:-32}"
SLOTS="${SLOTS:-4}"
REPEAT="${REPEAT:-1}"
CLIENT_ARGS="${CLIENT_ARGS:-}"
# CPU pinning: by default the server gets CPU 0 and the clients CPU 1, so the
# server's CPU is the contended resource (as on an appliance whose clients
# are other machines) instead of client and server competing for both cores.
# PIN=none runs unpinned.
if [ "${PIN:-split}" = split ] && command -v taskset >/dev/null && [ "$(nproc)" -ge 2 ]; then
    SERVER_PIN="taskset -c 0"
    CLIENT_PIN="taskset -c 1"
else
    SERVER_PIN=""
    CLIENT_PIN=""
fi
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
OUT="${OUT:-$(mktemp -d /tmp/uagate-fairness.XXXXXX)}"
mkdir -p "$OUT"
CLK_TCK="$(getconf CLK_TCK 2>/dev/null || echo 100)"

echo "building release binaries..." >&2
(cd "$ROOT" && cargo build --release -p uagate --bin uagate >&2)
(cd "$ROOT" && cargo build --release -p uagate-bench --bin uagate-bench-fairness >&2)
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

# config MODE: the uagate configuration of one cell on stdout.
config() {
    local threads=$SLOTS mode=$1
    case "$1" in
        balanced) threads=$((SLOTS + 3)) ;;
        trusted_w4) threads=$((SLOTS + 3)) mode=trusted_reservations ;;
    esac
    cat <<EOF
[listen]
opc_tcp = "127.0.0.1:0"

[server]
application_name = "uagate-fairness"
max_session_count = $((A_SESSIONS + B_SESSIONS + 10))
max_channel_count = $((A_SESSIONS + B_SESSIONS + 20))
max_request_thread_count = $threads
max_queued_request_count = 100

[isolation]
mode = "$mode"
EOF
    if [ "$1" = trusted_w4 ]; then
        cat <<EOF

[[isolation.trusted_owners]]
key = "a"
weight = ${A_WEIGHT:-4}
reservations = [{ stage = "request_execution", reserved = 0 }]

[[isolation.ingress]]
cidr = "127.0.0.2/32"
owner = "a"
EOF
    fi
}

RESULTS="$OUT/results.jsonl"
: >"$RESULTS"
LOAD0="$(cut -d' ' -f1-3 /proc/loadavg)"
for rep in $(seq 1 "$REPEAT"); do
    for mode in $MODES; do
        cell="$OUT/$mode.$rep"
        mkdir -p "$cell"
        config "$mode" >"$cell/uagate.toml"
        "$BIN/uagate" plan --config "$cell/uagate.toml" >"$cell/plan.txt"
        "$BIN/uagate" --data "$cell/data" config import "$cell/uagate.toml" >&2
        RUST_LOG="${RUST_LOG:-warn}" $SERVER_PIN "$BIN/uagate" --data "$cell/data" run \
            >"$cell/uagate.out" 2>"$cell/uagate.err" &
        SERVER_PID=$!
        url=""
        for _ in $(seq 1 600); do
            url="$(sed -n 's/^READY opc.tcp=//p' "$cell/uagate.out" 2>/dev/null | head -n1)"
            [ -n "$url" ] && break
            kill -0 "$SERVER_PID" 2>/dev/null || { cat "$cell/uagate.err" >&2; exit 1; }
            sleep 0.1
        done
        [ -n "$url" ] || { echo "uagate did not become ready" >&2; exit 1; }
        echo "cell: $mode (run $rep) at $url, $(grep RequestExecution "$cell/plan.txt")" >&2
        if ! $CLIENT_PIN "$BIN/uagate-bench-fairness" --endpoint "$url" \
            --a-sessions "$A_SESSIONS" --b-sessions "$B_SESSIONS" \
            --solo "$SOLO" --together "$TOGETHER" --warmup "$WARMUP" \
            --server-pid "$SERVER_PID" --clk-tck "$CLK_TCK" --label "$mode" $CLIENT_ARGS \
            >"$cell/result.json" 2>"$cell/bench.err"; then
            echo "  FAILED: $(tail -n 3 "$cell/bench.err" | tr '\n' ' ')" >&2
            printf '{"label":"%s","failed":true}\n' "$mode" >>"$RESULTS"
        else
            # Record the shared execution slot count with the client's line.
            sed "s/^{/{\"slots\":$SLOTS,/" "$cell/result.json" >>"$RESULTS"
        fi
        tail -n 1 "$RESULTS" >&2
        cleanup
    done
done
LOAD1="$(cut -d' ' -f1-3 /proc/loadavg)"

python3 - "$RESULTS" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
print("| mode | slots | A solo req/s | A solo p99 ms | A req/s together | B req/s together | A share | A p99 together ms | A p99 ratio | B p99 ms | errors A/B | server / client CPU s (together) |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|")
for r in rows:
    if r.get("failed"):
        print(f"| {r['label']} | | FAILED | | | | | | | | | |")
        continue
    s, a, b = r["solo_a"], r["together_a"], r["together_b"]
    f = lambda v: "n/a" if v is None else f"{v:.2f}"
    print(f"| {r['label']} | {r.get('slots', '')} | {s['req_per_s']:.0f} | {s['p99_us']/1000:.2f} | {a['req_per_s']:.0f} | "
          f"{b['req_per_s']:.0f} | {100*r['a_share']:.1f} % | {a['p99_us']/1000:.2f} | "
          f"{r['a_p99_ratio']} | {b['p99_us']/1000:.2f} | {a['errors']}/{b['errors']} | "
          f"{f(r.get('server_cpu_s_together'))} / {f(r.get('client_cpu_s_together'))} |")
PY
echo
echo "Load average (1/5/15 min) before: $LOAD0, after: $LOAD1."
echo "Raw results: $RESULTS"
