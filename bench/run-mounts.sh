#!/usr/bin/env bash
# One Read over several mounts (issue 16): the latency of a Read whose nodes
# are spread over MOUNTS field servers, against a Read of one mount alone.
#
# Starts MOUNTS (default 4) `uagate sim` field servers and one `uagate run`
# that mounts them as field servers line1..lineN (security None, as
# bench/run-field.sh mounts its one), all on 127.0.0.1 ephemeral ports. Then,
# for each SESSIONS_LIST entry, `uagate-bench` loops one Read per request in
# three cells:
#   mounts    through the gateway: the NODES (default Counter, Setpoint) of
#             every mount, i.e. 2 x 4 = 8 nodes, ordered line1's, line2's, ...
#   one-mount through the gateway: the same NODES of line1 only (2 nodes):
#             what the mounts cell costs when only the slowest mount counts
#   direct    against line1's simulator directly: the same 8-item Read (its
#             NODES repeated MOUNTS times), so the Read has the same size
# The cell order is reversed on even repetitions. A gateway that serves the
# mounts of one Read one after another has mounts-cell latency of about
# MOUNTS x one-mount; one that serves them concurrently approaches one-mount.
#
# Node ids through the gateway: all simulators publish urn:uagate:sim; the
# first mount to connect keeps that URI, the others get
# urn:uagate:field:<mount>:urn:uagate:sim (docs/field.md). Which mount was
# first changes from run to run, so the script finds it out: it probes each
# mount's prefixed URI until all but one read Good; the remaining one holds
# the plain URI (and is probed too).
#
# Neither `uagate sim` nor the gateway has an option to add field-server
# latency; the simulators answer in microseconds on loopback.
#
# CPU pinning (2-core machine; MOUNTS simulators, gateway, client):
#   PIN=appliance (default) gateway alone on CPU 1; simulators and client on
#             CPU 0 (the deployment shape, as in the issue-6 final run)
#   PIN=field  simulators on CPU 0; gateway and client on CPU 1
#   PIN=none   unpinned
#
# Usage: bench/run-mounts.sh [READ_SECS]    (default 10)
# Env:   MOUNTS=4 SESSIONS_LIST="1 16" REPEAT=3 WARMUP=2
#        NODES="Counter Setpoint" (Simulation.<id> per mount)
#        BIN_DIR=<dir>  use uagate and uagate-bench from there, build nothing
#        (e.g. BIN_DIR=/work/wt-bench/target/release)
#        GW_ENV="VAR=value ..."  extra environment for the gateway only
#        OUT=<dir> (default: a new temp dir)
# Prints Markdown tables; raw JSON lines go to $OUT/mounts.jsonl. Each cell
# also records the CPU time other processes took meanwhile (other_cpu_s, from
# /proc/stat minus this benchmark's processes): the machine is shared.
# This is a measurement, not a test: nothing here asserts on timings.
set -euo pipefail

READ_SECS="${1:-10}"
MOUNTS="${MOUNTS:-4}"
SESSIONS_LIST="${SESSIONS_LIST:-1 16}"
REPEAT="${REPEAT:-3}"
WARMUP="${WARMUP:-2}"
NODES="${NODES:-Counter Setpoint}"
PIN="${PIN:-appliance}"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
OUT="${OUT:-$(mktemp -d /tmp/uagate-mounts.XXXXXX)}"
mkdir -p "$OUT"
CLK_TCK="$(getconf CLK_TCK 2>/dev/null || echo 100)"
SIM_URI="urn:uagate:sim"

FIELD_PIN="" GW_PIN="" CLIENT_PIN=""
if [ "$PIN" != none ] && command -v taskset >/dev/null && [ "$(nproc)" -ge 2 ]; then
    case "$PIN" in
    appliance) FIELD_PIN="taskset -c 0" GW_PIN="taskset -c 1" CLIENT_PIN="taskset -c 0" ;;
    field) FIELD_PIN="taskset -c 0" GW_PIN="taskset -c 1" CLIENT_PIN="taskset -c 1" ;;
    *) echo "unknown PIN=$PIN (appliance, field, none)" >&2; exit 2 ;;
    esac
else
    PIN=none
fi

# Background servers stopped on exit, `start` (waits for READY) and
# `release_bins` (builds, or takes BIN_DIR).
. "$ROOT/bench/lib.sh"
release_bins -p uagate -p uagate-bench
for b in uagate uagate-bench; do
    [ -x "$BIN/$b" ] || { echo "no $BIN/$b" >&2; exit 2; }
done

PKI="$OUT/client-pki"
CLIENT_CERT="$("$BIN/uagate-bench" --pki "$PKI" --init-pki)"

# The field servers (taskset wraps exec, so $! is the server's own pid).
SIM_URLS=() SIM_PIDS=()
for i in $(seq 1 "$MOUNTS"); do
    RUST_LOG="${RUST_LOG:-warn}" start "sim$i" $FIELD_PIN "$BIN/uagate" sim \
        --listen 127.0.0.1:0 --pki "$OUT/sim$i-pki"
    SIM_URLS+=("$STARTED_URL")
    SIM_PIDS+=("$STARTED_PID")
done

# The gateway: temp data dir, loopback ephemeral port, lineN = simulator N.
DATA="$OUT/uagate-data"
cat >"$OUT/uagate.toml" <<EOF
[listen]
opc_tcp = "127.0.0.1:0"

[server]
application_name = "uagate-mounts-bench"
max_session_count = 150
max_channel_count = 160
max_concurrent_session_establishment = 64
EOF
for i in $(seq 1 "$MOUNTS"); do
    cat >>"$OUT/uagate.toml" <<EOF

[[field_servers]]
name = "line$i"
endpoints = ["${SIM_URLS[$((i - 1))]}"]
security_mode = "none"
security_policy = "None"
EOF
done
"$BIN/uagate" --data "$DATA" config import "$OUT/uagate.toml" >&2
"$BIN/uagate" --data "$DATA" trust add "$CLIENT_CERT" >&2
for i in $(seq 1 "$MOUNTS"); do
    "$BIN/uagate" --data "$DATA" trust add "$OUT/sim$i-pki/own/cert.der" >&2
done
RUST_LOG="${RUST_LOG:-warn}" start gateway $GW_PIN env ${GW_ENV:-} "$BIN/uagate" --data "$DATA" run
GW_PID=$STARTED_PID
GW_URL=$STARTED_URL
echo "simulators ${SIM_URLS[*]} (pids ${SIM_PIDS[*]}), gateway $GW_URL (pid $GW_PID), pinning: $PIN" >&2

# probe URL NODE-ARGS... : one session, 1 s of Reads; succeeds when the nodes
# resolve and read Good (a Read through the gateway blocks while the field
# connection connects and then fails with BadNoCommunication).
probe() {
    local url="$1"
    shift
    $CLIENT_PIN "$BIN/uagate-bench" --endpoint "$url" --pki "$PKI" --sessions 1 \
        --duration 1 --warmup 0 "$@" >/dev/null 2>>"$OUT/probe.err"
}

# The gateway namespace URI of each mount (MOUNT_URI[i-1] for line<i>).
MOUNT_URI=()
for i in $(seq 1 "$MOUNTS"); do MOUNT_URI+=(""); done
resolved=0
for _ in $(seq 1 60); do
    for i in $(seq 1 "$MOUNTS"); do
        [ -z "${MOUNT_URI[$((i - 1))]}" ] || continue
        uri="urn:uagate:field:line$i:$SIM_URI"
        if [ "$MOUNTS" -gt 1 ] && probe "$GW_URL" --node "nsu=$uri;s=Simulation.Counter"; then
            MOUNT_URI[$((i - 1))]="$uri"
            resolved=$((resolved + 1))
        fi
    done
    if [ "$resolved" -ge $((MOUNTS - 1)) ]; then
        for i in $(seq 1 "$MOUNTS"); do
            [ -z "${MOUNT_URI[$((i - 1))]}" ] || continue
            if probe "$GW_URL" --node "nsu=$SIM_URI;s=Simulation.Counter"; then
                MOUNT_URI[$((i - 1))]="$SIM_URI"
                resolved=$((resolved + 1))
            fi
        done
    fi
    [ "$resolved" -lt "$MOUNTS" ] || break
    sleep 1
done
if [ "$resolved" -lt "$MOUNTS" ]; then
    echo "not every mount reads Good through the gateway after 60 tries:" >&2
    for i in $(seq 1 "$MOUNTS"); do echo "  line$i: ${MOUNT_URI[$((i - 1))]:-?}" >&2; done
    tail -n 5 "$OUT/probe.err" >&2
    exit 1
fi
for i in $(seq 1 "$MOUNTS"); do echo "line$i: ${MOUNT_URI[$((i - 1))]}" >&2; done

# node_args CELL: the --node options of one cell's Read.
node_args() {
    local i id
    case "$1" in
    mounts) for i in $(seq 1 "$MOUNTS"); do
                for id in $NODES; do printf -- '--node %s;s=Simulation.%s ' "nsu=${MOUNT_URI[$((i - 1))]}" "$id"; done
            done ;;
    one-mount) for id in $NODES; do printf -- '--node %s;s=Simulation.%s ' "nsu=${MOUNT_URI[0]}" "$id"; done ;;
    direct) for i in $(seq 1 "$MOUNTS"); do
                for id in $NODES; do printf -- '--node %s;s=Simulation.%s ' "nsu=$SIM_URI" "$id"; done
            done ;;
    esac
}

# The machine is shared: per cell, the CPU time that processes other than
# this benchmark's (simulators, gateway, client) took, from /proc/stat minus
# ours, over the cell's wall time (connect, warm-up, measured window).
host_ticks() { awk '/^cpu /{print $2 + $3 + $4 + $7 + $8}' /proc/stat; }
server_ticks() {
    local t=0 p
    for p in "$GW_PID" "${SIM_PIDS[@]}"; do
        t=$((t + $(sed 's/^.*) //' "/proc/$p/stat" | awk '{print $12 + $13}')))
    done
    echo "$t"
}
# CHILD_TICKS: CPU of this shell's finished children (the client). Not a
# $(...): `times` in a subshell would report the subshell's (zero) children.
child_ticks() {
    times >"$OUT/times"
    CHILD_TICKS="$(tail -n 1 "$OUT/times" | awk -v hz="$CLK_TCK" '{
        split($1, u, /[ms]/); split($2, s, /[ms]/)
        printf "%d\n", (u[1] * 60 + u[2] + s[1] * 60 + s[2]) * hz + 0.5 }')"
}

LOAD0="$(cut -d' ' -f1-3 /proc/loadavg)"
RESULTS="$OUT/mounts.jsonl"
: >"$RESULTS"
for rep in $(seq 1 "$REPEAT"); do
    for sessions in $SESSIONS_LIST; do
        if [ $((rep % 2)) = 1 ]; then order="mounts one-mount direct"; else order="direct one-mount mounts"; fi
        for cell in $order; do
            case "$cell" in
            direct) url=${SIM_URLS[0]} pid=${SIM_PIDS[0]} extra=() ;;
            *) url=$GW_URL pid=$GW_PID extra=(--field-pid "${SIM_PIDS[0]}") ;;
            esac
            echo "run $rep: $cell, $sessions session(s), ${READ_SECS} s" >&2
            child_ticks
            h0=$(host_ticks) s0=$(server_ticks) c0=$CHILD_TICKS t0=$(date +%s.%N)
            # shellcheck disable=SC2046
            if ! $CLIENT_PIN "$BIN/uagate-bench" --endpoint "$url" --pki "$PKI" \
                --sessions "$sessions" --duration "$READ_SECS" --warmup "$WARMUP" \
                --server-pid "$pid" "${extra[@]}" --clk-tck "$CLK_TCK" \
                --label "$cell" $(node_args "$cell") \
                >"$OUT/last.json" 2>"$OUT/last.err"; then
                echo "  FAILED: $(tail -n 3 "$OUT/last.err" | tr '\n' ' ')" >&2
                printf '{"label":"%s","sessions":%s,"failed":true}\n' "$cell" "$sessions" >"$OUT/last.json"
            fi
            child_ticks
            h1=$(host_ticks) s1=$(server_ticks) c1=$CHILD_TICKS t1=$(date +%s.%N)
            other="$(awk -v h=$((h1 - h0 - (s1 - s0) - (c1 - c0))) -v hz="$CLK_TCK" \
                'BEGIN { printf "%.2f", (h < 0 ? 0 : h) / hz }')"
            wall="$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }')"
            sed "s/^{/{\"rep\":$rep,\"other_cpu_s\":$other,\"wall_s\":$wall,\"cores\":$(nproc),/" \
                "$OUT/last.json" >>"$RESULTS"
            tail -n 1 "$RESULTS" >&2
            # Let the servers drop the closed sessions (the simulator allows 20).
            sleep 2
        done
    done
done
LOAD1="$(cut -d' ' -f1-3 /proc/loadavg)"

python3 - "$RESULTS" "$MOUNTS" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
mounts = int(sys.argv[2])
path = {"mounts": f"gateway, {mounts} mounts", "one-mount": "gateway, line1 only", "direct": "direct, line1's sim"}
f = lambda v, d=2: "n/a" if v is None else f"{v:.{d}f}"
print("| run | sessions | cell | path | nodes/req | req/s | p50 ms | p99 ms | errors | server CPU s | other processes' CPU % |")
print("|---:|---:|---|---|---:|---:|---:|---:|---:|---:|---:|")
for r in rows:
    other = f"{100 * r['other_cpu_s'] / (r['wall_s'] * r['cores']):.0f}" if r.get("wall_s") else "n/a"
    if r.get("failed"):
        print(f"| {r['rep']} | {r['sessions']} | {r['label']} | {path[r['label']]} | | FAILED | | | | | {other} |")
        continue
    print(f"| {r['rep']} | {r['sessions']} | {r['label']} | {path[r['label']]} | {r['nodes_per_request']} | "
          f"{r['req_per_s']:.0f} | {r['p50_us']/1000:.3f} | {r['p99_us']/1000:.3f} | {r['errors']} | {f(r['server_cpu_s'])} | {other} |")
print()
print("server CPU s: the gateway's (the simulator's in direct cells) over the measured window. "
      "Other processes' CPU: what processes outside this benchmark took over the cell, in % of all cores.")
print()
print("Medians over the runs; **x one-mount** = mounts-cell p50 / one-mount p50 (same sessions).")
print()
print("| sessions | cell | runs | req/s | p50 ms | p99 ms | p50 x one-mount |")
print("|---:|---|---:|---:|---:|---:|---:|")
med = {}
for s in sorted({r["sessions"] for r in rows}):
    for cell in ("mounts", "one-mount", "direct"):
        ok = [r for r in rows if r["sessions"] == s and r["label"] == cell and not r.get("failed")]
        if not ok:
            continue
        m = {k: statistics.median(r[k] for r in ok) for k in ("req_per_s", "p50_us", "p99_us")}
        med[(s, cell)] = m
    for cell in ("mounts", "one-mount", "direct"):
        if (s, cell) not in med:
            continue
        m, one = med[(s, cell)], med.get((s, "one-mount"))
        x = f"{m['p50_us'] / one['p50_us']:.2f}" if one and one["p50_us"] else "n/a"
        runs = sum(1 for r in rows if r["sessions"] == s and r["label"] == cell and not r.get("failed"))
        print(f"| {s} | {cell} | {runs} | {m['req_per_s']:.0f} | {m['p50_us']/1000:.3f} | {m['p99_us']/1000:.3f} | {x} |")
PY
echo
echo "Pinning: $PIN. Binaries: $BIN. Load average (1/5/15 min) before: $LOAD0, after: $LOAD1."
echo "Raw results: $RESULTS; server logs in $OUT."
