#!/usr/bin/env bash
# Read throughput benchmark driver: uagate vs. a plain async-opcua server.
#
# Builds release binaries, starts `uagate run` and `opcua-ref-server` as
# separate processes on 127.0.0.1, trusts the bench client certificate in
# uagate, runs the matrix {uagate, async-opcua} x {none, basic256sha256}
# x {1, 16, 64 sessions} and prints a Markdown table (raw JSON lines go to
# $OUT/results.jsonl). Servers and client share this machine's cores.
#
# Usage: bench/run.sh [DURATION_SECS]      (default 10 s per cell)
# Env:   SESSIONS="1 16 64"  SECURITY="none basic256sha256"  WARMUP=2
#        REPEAT=1   how many times to run the whole matrix (rows are numbered)
#        OUT=<dir for logs and results>  (default: a new temp dir)
#        UAGATE_EXTRA=<TOML appended to uagate's configuration>
#        GW_ENV="VAR=value ..."  extra environment for uagate only (e.g.
#                      TOKIO_WORKER_THREADS=1)
#        REF=ref|sim   comparison server: the bench's opcua-ref-server
#                      (default) or `uagate sim` (async-opcua default limit of
#                      20 sessions, so 64-session cells fail against it).
# This is a measurement, not a test: nothing here asserts on timings.
set -euo pipefail

DURATION="${1:-10}"
SESSIONS="${SESSIONS:-1 16 64}"
SECURITY="${SECURITY:-none basic256sha256}"
WARMUP="${WARMUP:-2}"
REF="${REF:-ref}"
REPEAT="${REPEAT:-1}"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
OUT="${OUT:-$(mktemp -d /tmp/uagate-bench.XXXXXX)}"
mkdir -p "$OUT"
CLK_TCK="$(getconf CLK_TCK 2>/dev/null || echo 100)"

# Background servers stopped on exit, `start` (waits for READY) and
# `release_bins` (BIN_DIR=<dir> measures the binaries there, builds nothing).
. "$ROOT/bench/lib.sh"
release_bins -p uagate -p uagate-bench

# Client certificate (created once, reused for every cell).
PKI="$OUT/client-pki"
CLIENT_CERT="$("$BIN/uagate-bench" --pki "$PKI" --init-pki)"

# uagate: temp data dir, loopback ephemeral port, room for 64+ sessions.
DATA="$OUT/uagate-data"
cat >"$OUT/uagate.toml" <<'EOF'
[listen]
opc_tcp = "127.0.0.1:0"

[server]
application_name = "uagate-bench"
max_session_count = 200
max_channel_count = 220
max_concurrent_session_establishment = 64
EOF
# Extra TOML appended to the uagate configuration (e.g. an [isolation] table).
if [ -n "${UAGATE_EXTRA:-}" ]; then printf '\n%s\n' "$UAGATE_EXTRA" >>"$OUT/uagate.toml"; fi
"$BIN/uagate" --data "$DATA" config import "$OUT/uagate.toml" >&2
"$BIN/uagate" --data "$DATA" trust add "$CLIENT_CERT" >&2
RUST_LOG="${RUST_LOG:-warn}" start uagate env ${GW_ENV:-} "$BIN/uagate" --data "$DATA" run
UAGATE_PID=$STARTED_PID
UAGATE_URL=$STARTED_URL

if [ "$REF" = sim ]; then
    REF_NAME="uagate sim (async-opcua 0.19)"
    RUST_LOG="${RUST_LOG:-warn}" start ref "$BIN/uagate" sim --listen 127.0.0.1:0 --pki "$OUT/ref-pki"
else
    REF_NAME="async-opcua-server 0.19"
    RUST_LOG="${RUST_LOG:-warn}" start ref "$BIN/opcua-ref-server" --listen 127.0.0.1:0 --pki "$OUT/ref-pki"
fi
REF_PID=$STARTED_PID
REF_URL=$STARTED_URL
echo "uagate $UAGATE_URL (pid $UAGATE_PID), $REF_NAME $REF_URL (pid $REF_PID)" >&2

cpu_s() { # total CPU seconds (utime+stime) of a pid
    awk -v t="$CLK_TCK" '{ sub(/^.*\) /, ""); printf "%.2f", ($12 + $13) / t }' "/proc/$1/stat"
}
LOAD0="$(cut -d' ' -f1-3 /proc/loadavg)"
UAGATE_CPU0=$(cpu_s "$UAGATE_PID")
REF_CPU0=$(cpu_s "$REF_PID")

# Freshly started servers are slower for their first seconds (the first cell
# measured up to 2x lower than the same cell later): warm both up with a
# short, discarded run per security mode before measuring.
for sec in $SECURITY; do
    for url in "$UAGATE_URL" "$REF_URL"; do
        "$BIN/uagate-bench" --endpoint "$url" --sessions 16 --duration 3 --warmup 0 \
            --security "$sec" --pki "$PKI" >/dev/null 2>"$OUT/bench-last.err" ||
            { echo "warm-up against $url failed:" >&2; cat "$OUT/bench-last.err" >&2; exit 1; }
    done
done

RESULTS="$OUT/results.jsonl"
: >"$RESULTS"
for rep in $(seq 1 "$REPEAT"); do
for sec in $SECURITY; do
    for n in $SESSIONS; do
        for target in uagate ref; do
            if [ "$target" = uagate ]; then
                url=$UAGATE_URL pid=$UAGATE_PID label="uagate"
            else
                url=$REF_URL pid=$REF_PID label="$REF_NAME"
            fi
            echo "cell: $label $sec $n sessions" >&2
            if ! "$BIN/uagate-bench" --endpoint "$url" --sessions "$n" --duration "$DURATION" \
                --warmup "$WARMUP" --security "$sec" --pki "$PKI" --server-pid "$pid" \
                --clk-tck "$CLK_TCK" --label "$label" >>"$RESULTS" 2>"$OUT/bench-last.err"; then
                echo "  FAILED: $(tail -n 3 "$OUT/bench-last.err" | tr '\n' ' ')" >&2
                printf '{"label":"%s","security":"%s","sessions":%s,"failed":true}\n' \
                    "$label" "$sec" "$n" >>"$RESULTS"
            fi
            tail -n 1 "$RESULTS" >&2
        done
    done
done
done

UAGATE_CPU1=$(cpu_s "$UAGATE_PID")
REF_CPU1=$(cpu_s "$REF_PID")
LOAD1="$(cut -d' ' -f1-3 /proc/loadavg)"

# Markdown table from the JSON lines.
python3 - "$RESULTS" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
seen = {}
for r in rows:
    k = (r["label"], r["security"], r["sessions"])
    seen[k] = seen.get(k, 0) + 1
    r["rep"] = seen[k]
rows.sort(key=lambda r: (r["rep"], r["security"] != "none", r["sessions"], r["label"] != "uagate"))
print("| run | server | security | sessions | req/s | p50 ms | p99 ms | errors | server CPU s | server CPU µs/req | client CPU s |")
print("|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
for r in rows:
    if r.get("failed"):
        print(f"| {r['rep']} | {r['label']} | {r['security']} | {r['sessions']} | FAILED | | | | | | |")
        continue
    f = lambda v, d=2: "n/a" if v is None else f"{v:.{d}f}"
    print(f"| {r['rep']} | {r['label']} | {r['security']} | {r['sessions']} | {r['req_per_s']:.0f} | "
          f"{r['p50_us']/1000:.2f} | {r['p99_us']/1000:.2f} | {r['errors']} | "
          f"{f(r['server_cpu_s'])} | {f(r['server_cpu_us_per_req'], 0)} | {f(r['client_cpu_s'])} |")
PY
echo
echo "Whole run, CPU seconds (from /proc/<pid>/stat, incl. connects and warm-ups): uagate $(awk -v a="$UAGATE_CPU0" -v b="$UAGATE_CPU1" 'BEGIN{printf "%.2f", b-a}'), comparison server $(awk -v a="$REF_CPU0" -v b="$REF_CPU1" 'BEGIN{printf "%.2f", b-a}')."
echo "Load average (1/5/15 min) before: $LOAD0, after: $LOAD1 (servers + client alone would be about 2)."
echo "Raw results: $RESULTS"
