#!/usr/bin/env bash
# Notification throughput benchmark driver: uagate vs. a plain async-opcua server.
#
# Builds release binaries, starts `uagate run` (temp data dir, room for 150
# sessions) and `opcua-ref-server` as separate processes on 127.0.0.1, then
# runs `uagate-bench-notify` against each, one after the other, with the same
# load: SESSIONS sessions x ITEMS monitored items on a UInt32 counter that the
# server increments every 100 ms, sampling SAMPLING_MS, publishing
# PUBLISHING_MS, security None, anonymous. Prints a Markdown table (raw JSON
# lines go to $OUT/notify.jsonl). Servers and client share this machine.
#
# Usage: bench/run-notify.sh [DURATION_SECS]      (default 30 s per target)
# Env:   SESSIONS=100 ITEMS=100 SAMPLING_MS=100 PUBLISHING_MS=100 WARMUP=5
#        REPEAT=1   how many times to run the targets (rows are numbered)
#        NOMINAL=1  also run a second opcua-ref-server with --nominal-timestamps
#                   (counter values stamped start + n x 100 ms instead of the
#                   wall clock; see opcua-ref-server --help), 0 to skip it
#        OUT=<dir for logs and results>  (default: a new temp dir)
#        BIN_DIR=<dir>  use the release binaries there instead of building
#        ONLY=uagate    run only that target (uagate, ref or refnom)
#        PERF=1         record a `perf` profile of uagate during each of its
#                       measured windows ($OUT/perf-uagate-REP.data; read it
#                       with `perf report -i`), PERF_ARGS to change `-g`
# Nodes: uagate  nsu=urn:uagate:gateway;s=Gateway.Demo.Counter
#        ref     nsu=urn:uagate:bench:ref-server;s=Bench.Counter
# (namespace indexes are looked up in each server's NamespaceArray).
# This is a measurement, not a test: nothing here asserts on timings.
set -euo pipefail

DURATION="${1:-30}"
SESSIONS="${SESSIONS:-100}"
ITEMS="${ITEMS:-100}"
SAMPLING_MS="${SAMPLING_MS:-100}"
PUBLISHING_MS="${PUBLISHING_MS:-100}"
WARMUP="${WARMUP:-5}"
REPEAT="${REPEAT:-1}"
NOMINAL="${NOMINAL:-1}"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
OUT="${OUT:-$(mktemp -d /tmp/uagate-notify.XXXXXX)}"
mkdir -p "$OUT"
CLK_TCK="$(getconf CLK_TCK 2>/dev/null || echo 100)"
UAGATE_NODE="nsu=urn:uagate:gateway;s=Gateway.Demo.Counter"
REF_NODE="nsu=urn:uagate:bench:ref-server;s=Bench.Counter"

# Background servers stopped on exit, `start` (waits for READY) and
# `release_bins` (builds, or takes $BIN_DIR).
. "$ROOT/bench/lib.sh"
release_bins -p uagate --bin uagate
[ -n "${BIN_DIR:-}" ] || (cd "$ROOT" && cargo build --release -p uagate-bench >&2)

PKI="$OUT/client-pki"
CLIENT_CERT="$("$BIN/uagate-bench" --pki "$PKI" --init-pki)"

# uagate: temp data dir, loopback ephemeral port, room for SESSIONS + margin.
DATA="$OUT/uagate-data"
cat >"$OUT/uagate.toml" <<'EOF'
[listen]
opc_tcp = "127.0.0.1:0"

[server]
application_name = "uagate-bench"
max_session_count = 150
max_channel_count = 160
max_concurrent_session_establishment = 64
demo_nodes = true
EOF
"$BIN/uagate" --data "$DATA" config import "$OUT/uagate.toml" >&2
"$BIN/uagate" --data "$DATA" trust add "$CLIENT_CERT" >&2
RUST_LOG="${RUST_LOG:-warn}" start uagate "$BIN/uagate" --data "$DATA" run
UAGATE_PID=$STARTED_PID
UAGATE_URL=$STARTED_URL

REF_NAME="async-opcua-server 0.19"
RUST_LOG="${RUST_LOG:-warn}" start ref "$BIN/opcua-ref-server" --listen 127.0.0.1:0 \
    --pki "$OUT/ref-pki" --max-sessions 150 --counter-ms 100
REF_PID=$STARTED_PID
REF_URL=$STARTED_URL
echo "uagate $UAGATE_URL (pid $UAGATE_PID), $REF_NAME $REF_URL (pid $REF_PID)" >&2
TARGETS="uagate ref"
if [ "$NOMINAL" = 1 ]; then
    RUST_LOG="${RUST_LOG:-warn}" start refnom "$BIN/opcua-ref-server" --listen 127.0.0.1:0 \
        --pki "$OUT/ref-pki" --max-sessions 150 --counter-ms 100 --nominal-timestamps
    REFNOM_PID=$STARTED_PID
    REFNOM_URL=$STARTED_URL
    TARGETS="uagate ref refnom"
    echo "$REF_NAME (nominal timestamps) $REFNOM_URL (pid $REFNOM_PID)" >&2
fi

if [ -n "${ONLY:-}" ]; then
    TARGETS="$ONLY"
fi

RESULTS="$OUT/notify.jsonl"
: >"$RESULTS"
LOAD0="$(cut -d' ' -f1-3 /proc/loadavg)"
for rep in $(seq 1 "$REPEAT"); do
    for target in $TARGETS; do
        case "$target" in
        uagate) url=$UAGATE_URL pid=$UAGATE_PID node=$UAGATE_NODE label="uagate" ;;
        ref) url=$REF_URL pid=$REF_PID node=$REF_NODE label="$REF_NAME" ;;
        *) url=$REFNOM_URL pid=$REFNOM_PID node=$REF_NODE label="$REF_NAME, nominal ts" ;;
        esac
        echo "run $rep: $label, $SESSIONS sessions x $ITEMS items, ${DURATION} s" >&2
        if [ "${PERF:-0}" = 1 ] && [ "$target" = uagate ] && command -v perf >/dev/null; then
            # shellcheck disable=SC2086
            (sleep "$((WARMUP + 2))"; perf record -q ${PERF_ARGS:--g} -F 999 -p "$pid" \
                -o "$OUT/perf-uagate-$rep.data" -- sleep "$DURATION" >/dev/null 2>&1) &
        fi
        if ! "$BIN/uagate-bench-notify" --endpoint "$url" --node "$node" \
            --sessions "$SESSIONS" --items "$ITEMS" --sampling-ms "$SAMPLING_MS" \
            --publishing-ms "$PUBLISHING_MS" --duration "$DURATION" --warmup "$WARMUP" \
            --pki "$PKI" --server-pid "$pid" --clk-tck "$CLK_TCK" --label "$label" \
            >>"$RESULTS" 2>"$OUT/notify-last.err"; then
            echo "  FAILED: $(tail -n 3 "$OUT/notify-last.err" | tr '\n' ' ')" >&2
            printf '{"label":"%s","failed":true}\n' "$label" >>"$RESULTS"
        fi
        tail -n 1 "$RESULTS" >&2
        # Let the server drop the closed sessions before the next target.
        sleep 3
    done
done
LOAD1="$(cut -d' ' -f1-3 /proc/loadavg)"

python3 - "$RESULTS" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
seen = {}
for r in rows:
    seen[r["label"]] = seen.get(r["label"], 0) + 1
    r["rep"] = seen[r["label"]]
print("| run | server | sessions x items | notif/s | expected/s | missing % | min-max per s "
      "| value skips / repeats | publish lat p50/p99 ms | source lat p50/p99 ms | errors "
      "| server CPU % | server RSS start/max MiB | client CPU % |")
print("|---:|---|---|---:|---:|---:|---|---|---|---|---:|---:|---|---:|")
f = lambda v, d=1: "n/a" if v is None else f"{v:.{d}f}"
mib = lambda v: "n/a" if v is None else f"{v/1024:.1f}"
for r in rows:
    if r.get("failed"):
        print(f"| {r['rep']} | {r['label']} | | FAILED | | | | | | | | | | |")
        continue
    errors = r["bad_status"] + r["not_u32"] + r["status_changes"] + r["seq_gaps"] + r["sessions_lost"]
    print(f"| {r['rep']} | {r['label']} | {r['sessions']} x {r['items']} | {r['notif_per_s']:.0f} | "
          f"{r['expected_per_s']:.0f} | {r['missing_pct']:.1f} | {r['per_s_min']}-{r['per_s_max']} | "
          f"{r['value_skips']} / {r['value_repeats']} | "
          f"{f(r['publish_lat_p50_ms'])} / {f(r['publish_lat_p99_ms'])} | "
          f"{f(r['source_lat_p50_ms'])} / {f(r['source_lat_p99_ms'])} | {errors} | "
          f"{f(r['server_cpu_pct'])} | {mib(r['server_rss_start_kib'])} / {mib(r['server_rss_max_kib'])} | "
          f"{f(r['client_cpu_pct'])} |")
PY
echo
echo "Load average (1/5/15 min) before: $LOAD0, after: $LOAD1."
echo "Raw results: $RESULTS"
