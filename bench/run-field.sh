#!/usr/bin/env bash
# Field-connection benchmark driver (issue 6): uagate as a gateway in front of
# a simulated field server vs. the same field server accessed directly.
#
# Starts `uagate sim` (the field server, 127.0.0.1 ephemeral port) and a
# `uagate run` whose configuration mounts it as field server "line1"
# (security None), then:
#   1. Read: `uagate-bench` with SESSIONS sessions looping Read(NODES) against
#      the field server directly and through the gateway, alternating the
#      order per repetition (run 1: direct then gateway, run 2: gateway then
#      direct, ...). Nodes are given as nsu=urn:uagate:sim;s=..., so each
#      side resolves its own namespace index from its NamespaceArray.
#   2. Fan-out: `uagate-bench-notify` with FANOUT layouts (sessions x items,
#      1,000 northbound monitored items each) on Simulation.Counter through the
#      gateway, and one direct layout (DIRECT_FANOUT) against the simulator
#      for reference. The field server's CPU (`--field-pid`) and the bytes
#      and segments per second its sockets send and receive (`--field-port`,
#      via `ss -tin`) are reported: one shared southbound item means a few
#      hundred bytes/s, one southbound item per northbound item would be
#      tens of KB/s (compare with the direct row, where the simulator serves
#      the 1,000 items itself).
# Prints Markdown tables; raw JSON lines go to $OUT/read.jsonl and
# $OUT/fanout.jsonl. A Read row's "added p50 µs" is its median latency minus
# the direct row's of the same run and node set (with SESSIONS=1: the
# latency the gateway or relay adds to one client's Read).
#
# CPU pinning (this is a 2-core machine; three processes: field server,
# gateway, client):
#   PIN=field   (default) field server on CPU 0; gateway and client on CPU 1.
#               The field server has a core of its own in both modes, as a
#               field device would; the gateway competes with the client.
#   PIN=servers field server and gateway on CPU 0, client on CPU 1 (the
#               gateway takes CPU from the field server: worst case for it).
#   PIN=appliance  gateway alone on CPU 1; field server and client share
#               CPU 0 in both modes. This is the deployment shape: the
#               gateway is its own appliance, the client and the PLC are
#               other machines (here: one shared core, the same in both runs).
#   PIN=none    unpinned.
#
# Usage: bench/run-field.sh [READ_SECS] [FANOUT_SECS]    (default 10 30)
# Env:   SESSIONS=16 REPEAT=2 WARMUP=2 (read) NOTIFY_WARMUP=5
#        PERF=1: record a flat `perf` profile of the gateway in each gateway
#        read cell ($OUT/perf-REP-SET.data; read it with `perf report -i`)
#        READ_SETS="8 1"  node sets per read cell: 8 = the eight Simulation
#                 variables with a Value, 1 = Simulation.Setpoint only,
#                 local = Server_ServerStatus_CurrentTime (i=2258), which each
#                 side serves itself: the gateway's own cost of a request
#                 without the proxy, for comparison with the 1-node cell
#        FANOUT="10x100 100x10"  DIRECT_FANOUT="10x100" (empty to skip)
#        SAMPLING_MS=100 PUBLISHING_MS=100
#        GW_ENV="VAR=value ..."  extra environment for the gateway only
#        (e.g. UAGATE_EVENT_INTERVAL=61)
#        SKIP_READ=1 / SKIP_FANOUT=1   OUT=<dir> (default: a new temp dir)
#        FIELD=sim (default) the field server is `uagate sim` (async-opcua
#                 0.19 with the Simulation variables of mixed types);
#              ref  the bench's `opcua-ref-server --doubles 8` (async-opcua
#                 0.19, eight Double variables Bench.D0..D7, node sets 8 and 1
#                 read those; fan-out uses Bench.Counter, 100 ms)
#        RELAY=1  also a `relay` read cell: the client's sessions go through
#                 `uagate-bench-relay` (a one-thread TCP byte relay, pinned
#                 like the gateway) to the field server; its CPU per Read,
#                 reported in the gateway columns, is the floor of any process
#                 in the middle on this host
#        BIN_DIR=<dir>  use uagate and uagate-bench* from there, build nothing
#        (e.g. another commit's worktree target/release)
# This is a measurement, not a test: nothing here asserts on timings.
set -euo pipefail

READ_SECS="${1:-10}"
FANOUT_SECS="${2:-30}"
SESSIONS="${SESSIONS:-16}"
REPEAT="${REPEAT:-2}"
WARMUP="${WARMUP:-2}"
NOTIFY_WARMUP="${NOTIFY_WARMUP:-5}"
READ_SETS="${READ_SETS:-8 1}"
FANOUT="${FANOUT:-10x100 100x10}"
DIRECT_FANOUT="${DIRECT_FANOUT-10x100}"
SAMPLING_MS="${SAMPLING_MS:-100}"
PUBLISHING_MS="${PUBLISHING_MS:-100}"
PIN="${PIN:-field}"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
OUT="${OUT:-$(mktemp -d /tmp/uagate-field.XXXXXX)}"
mkdir -p "$OUT"
CLK_TCK="$(getconf CLK_TCK 2>/dev/null || echo 100)"
FIELD="${FIELD:-sim}"
case "$FIELD" in
sim)
    NSU="nsu=urn:uagate:sim"
    COUNTER="Simulation.Counter"
    # `uagate sim` changes its values every 500 ms (SimConfig default).
    CHANGE_MS=500 ;;
ref)
    NSU="nsu=urn:uagate:bench:ref-server"
    COUNTER="Bench.Counter"
    CHANGE_MS=100 ;;
*) echo "unknown FIELD=$FIELD (sim, ref)" >&2; exit 2 ;;
esac

FIELD_PIN="" GW_PIN="" CLIENT_PIN=""
if [ "$PIN" != none ] && command -v taskset >/dev/null && [ "$(nproc)" -ge 2 ]; then
    case "$PIN" in
    field) FIELD_PIN="taskset -c 0" GW_PIN="taskset -c 1" CLIENT_PIN="taskset -c 1" ;;
    servers) FIELD_PIN="taskset -c 0" GW_PIN="taskset -c 0" CLIENT_PIN="taskset -c 1" ;;
    appliance) FIELD_PIN="taskset -c 0" GW_PIN="taskset -c 1" CLIENT_PIN="taskset -c 0" ;;
    *) echo "unknown PIN=$PIN (field, servers, appliance, none)" >&2; exit 2 ;;
    esac
else
    PIN=none
fi

# Background servers stopped on exit, `start` (waits for READY) and
# `release_bins` (builds, or takes BIN_DIR).
. "$ROOT/bench/lib.sh"
release_bins -p uagate -p uagate-bench

PKI="$OUT/client-pki"
CLIENT_CERT="$("$BIN/uagate-bench" --pki "$PKI" --init-pki)"

# The field server (taskset wraps exec, so $! is the server's own pid).
if [ "$FIELD" = ref ]; then
    RUST_LOG="${RUST_LOG:-warn}" start sim $FIELD_PIN "$BIN/opcua-ref-server" --listen 127.0.0.1:0 \
        --pki "$OUT/sim-pki" --doubles 8 --counter-ms "$CHANGE_MS"
else
    RUST_LOG="${RUST_LOG:-warn}" start sim $FIELD_PIN "$BIN/uagate" sim --listen 127.0.0.1:0 \
        --pki "$OUT/sim-pki"
fi
SIM_PID=$STARTED_PID
SIM_URL=$STARTED_URL
SIM_PORT="$(echo "$SIM_URL" | sed -E 's#.*:([0-9]+)/?$#\1#')"

# The gateway: temp data dir, loopback ephemeral port, line1 = the simulator.
DATA="$OUT/uagate-data"
cat >"$OUT/uagate.toml" <<EOF
[listen]
opc_tcp = "127.0.0.1:0"

[server]
application_name = "uagate-field-bench"
max_session_count = 150
max_channel_count = 160
max_concurrent_session_establishment = 64

[[field_servers]]
name = "line1"
endpoints = ["$SIM_URL"]
security_mode = "none"
security_policy = "None"
EOF
"$BIN/uagate" --data "$DATA" config import "$OUT/uagate.toml" >&2
"$BIN/uagate" --data "$DATA" trust add "$CLIENT_CERT" >&2
"$BIN/uagate" --data "$DATA" trust add "$OUT/sim-pki/own/cert.der" >&2
RUST_LOG="${RUST_LOG:-warn}" start gateway $GW_PIN env ${GW_ENV:-} "$BIN/uagate" --data "$DATA" run
GW_PID=$STARTED_PID
GW_URL=$STARTED_URL
echo "field server $SIM_URL (pid $SIM_PID), gateway $GW_URL (pid $GW_PID), pinning: $PIN" >&2
RELAY_TARGET=""
if [ "${RELAY:-0}" = 1 ]; then
    start relay $GW_PIN "$BIN/uagate-bench-relay" --listen 127.0.0.1:0 --to "127.0.0.1:$SIM_PORT"
    RELAY_PID=$STARTED_PID
    RELAY_URL=$STARTED_URL
    RELAY_TARGET=relay
    echo "relay $RELAY_URL (pid $RELAY_PID) in front of the field server" >&2
fi

node_args() {
    case "$FIELD:$1" in
    ref:8) for i in 0 1 2 3 4 5 6 7; do printf -- '--node %s;s=Bench.D%s ' "$NSU" "$i"; done ;;
    ref:1) printf -- '--node %s;s=Bench.D0 ' "$NSU" ;;
    *:8) for id in Counter Sine Random Toggle Text Timestamp Setpoint Random.EURange; do
           printf -- '--node %s;s=Simulation.%s ' "$NSU" "$id"
       done ;;
    *:1) printf -- '--node %s;s=Simulation.Setpoint ' "$NSU" ;;
    *:local) printf -- '--node i=2258 ' ;;
    *) echo "unknown read set $1" >&2; exit 2 ;;
    esac
}

LOAD0="$(cut -d' ' -f1-3 /proc/loadavg)"

# Wait until the gateway's field connection serves reads (a read through the
# gateway blocks while it connects and then fails with BadNoCommunication).
for _ in $(seq 1 30); do
    if $CLIENT_PIN "$BIN/uagate-bench" --endpoint "$GW_URL" --pki "$PKI" --sessions 1 \
        --duration 1 --warmup 0 $(node_args 1) >/dev/null 2>"$OUT/probe.err"; then
        break
    fi
    sleep 1
done

READ_RESULTS="$OUT/read.jsonl"
: >"$READ_RESULTS"
if [ "${SKIP_READ:-0}" != 1 ]; then
    for rep in $(seq 1 "$REPEAT"); do
        for set in $READ_SETS; do
            if [ $((rep % 2)) = 1 ]; then order="direct gateway $RELAY_TARGET"; else order="$RELAY_TARGET gateway direct"; fi
            for target in $order; do
                case "$target" in
                direct) url=$SIM_URL pid=$SIM_PID extra=() ;;
                gateway) url=$GW_URL pid=$GW_PID extra=(--field-pid "$SIM_PID") ;;
                relay) url=$SIM_URL pid=$RELAY_PID extra=(--field-pid "$SIM_PID" --connect-url "$RELAY_URL") ;;
                esac
                echo "read run $rep: $target, $SESSIONS sessions, $set node(s)/request, ${READ_SECS} s" >&2
                # PERF=1: a flat CPU profile of the gateway during its measured window.
                if [ "${PERF:-0}" = 1 ] && [ "$target" = gateway ] && command -v perf >/dev/null; then
                    (sleep "$WARMUP"; perf record -q ${PERF_ARGS:--g} -F 1999 -p "$GW_PID" -o "$OUT/perf-$rep-$set.data" \
                        -- sleep "$READ_SECS" >/dev/null 2>&1) &
                fi
                # shellcheck disable=SC2046
                if ! $CLIENT_PIN "$BIN/uagate-bench" --endpoint "$url" --pki "$PKI" \
                    --sessions "$SESSIONS" --duration "$READ_SECS" --warmup "$WARMUP" \
                    --server-pid "$pid" "${extra[@]}" --clk-tck "$CLK_TCK" \
                    --label "$target" $(node_args "$set") \
                    >"$OUT/read-last.json" 2>"$OUT/read-last.err"; then
                    echo "  FAILED: $(tail -n 3 "$OUT/read-last.err" | tr '\n' ' ')" >&2
                    printf '{"label":"%s","failed":true}\n' "$target" >"$OUT/read-last.json"
                fi
                sed "s/^{/{\"rep\":$rep,\"set\":\"$set\",/" "$OUT/read-last.json" >>"$READ_RESULTS"
                tail -n 1 "$READ_RESULTS" >&2
                # Let the servers drop the closed sessions (the simulator allows 20).
                sleep 2
            done
        done
    done
fi

FANOUT_RESULTS="$OUT/fanout.jsonl"
: >"$FANOUT_RESULTS"
if [ "${SKIP_FANOUT:-0}" != 1 ]; then
    cells=""
    for l in $FANOUT; do cells="$cells gateway:$l"; done
    for l in $DIRECT_FANOUT; do cells="$cells direct:$l"; done
    for rep in $(seq 1 "$REPEAT"); do
        for cell in $cells; do
            target="${cell%%:*}" layout="${cell#*:}"
            sessions="${layout%x*}" items="${layout#*x}"
            # --field-pid also for direct: the simulator's bytes/s with 1,000
            # items of its own, for comparison with the gateway's southbound side.
            case "$target" in
            direct) url=$SIM_URL pid=$SIM_PID ;;
            gateway) url=$GW_URL pid=$GW_PID ;;
            esac
            extra=(--field-pid "$SIM_PID" --field-port "$SIM_PORT")
            echo "fan-out run $rep: $target, $sessions sessions x $items items, ${FANOUT_SECS} s" >&2
            if ! $CLIENT_PIN "$BIN/uagate-bench-notify" --endpoint "$url" \
                --node "$NSU;s=$COUNTER" --sessions "$sessions" --items "$items" \
                --sampling-ms "$SAMPLING_MS" --publishing-ms "$PUBLISHING_MS" \
                --change-ms "$CHANGE_MS" --duration "$FANOUT_SECS" --warmup "$NOTIFY_WARMUP" \
                --pki "$PKI" --server-pid "$pid" "${extra[@]}" --clk-tck "$CLK_TCK" \
                --label "$target" >"$OUT/fanout-last.json" 2>"$OUT/fanout-last.err"; then
                echo "  FAILED: $(tail -n 3 "$OUT/fanout-last.err" | tr '\n' ' ')" >&2
                printf '{"label":"%s","failed":true}\n' "$target" >"$OUT/fanout-last.json"
            fi
            sed "s/^{/{\"rep\":$rep,/" "$OUT/fanout-last.json" >>"$FANOUT_RESULTS"
            tail -n 1 "$FANOUT_RESULTS" >&2
            # Let the gateway drop the closed sessions and their shared item.
            sleep 3
        done
    done
fi
LOAD1="$(cut -d' ' -f1-3 /proc/loadavg)"

python3 - "$READ_RESULTS" "$FANOUT_RESULTS" <<'PY'
import json, sys
reads = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
fan = [json.loads(l) for l in open(sys.argv[2]) if l.strip()]
f = lambda v, d=2: "n/a" if v is None else f"{v:.{d}f}"
if reads:
    print("| run | node set | path | sessions | req/s | ratio gw/direct | p50 ms | p99 ms | errors | gateway CPU s | gateway CPU µs/req | field server CPU s | field CPU µs/req | client CPU s | added p50 µs |")
    print("|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    direct = {(r["rep"], r["set"]): r for r in reads if r["label"] == "direct" and not r.get("failed")}
    for r in reads:
        if r.get("failed"):
            print(f"| {r['rep']} | {r['set']} | {r['label']} | | FAILED | | | | | | | | | | |")
            continue
        d = direct.get((r["rep"], r["set"]))
        ratio = f"{r['req_per_s'] / d['req_per_s']:.2f}" if d and d["req_per_s"] else "n/a"
        if r["label"] == "direct":
            gw_cpu, gw_per_req, field_cpu, ratio = "-", "-", r["server_cpu_s"], "1.00"
        else:
            gw_cpu, field_cpu = f(r["server_cpu_s"]), r.get("field_cpu_s")
            gw_per_req = "n/a" if r["server_cpu_s"] is None or not r["requests"] else f"{r['server_cpu_s'] * 1e6 / r['requests']:.1f}"

        per_req = "n/a" if field_cpu is None or not r["requests"] else f"{field_cpu * 1e6 / r['requests']:.1f}"
        # What the path in the middle adds to a Read's median latency over the direct
        # path of the same run and node set (the issue 16 bound at one session).
        added = "-" if r["label"] == "direct" else ("n/a" if not d else f"{r['p50_us'] - d['p50_us']}")
        print(f"| {r['rep']} | {r['set']} | {r['label']} | {r['sessions']} | {r['req_per_s']:.0f} | {ratio} | "
              f"{r['p50_us']/1000:.2f} | {r['p99_us']/1000:.2f} | {r['errors']} | {gw_cpu} | {gw_per_req} | {f(field_cpu)} | {per_req} | {f(r['client_cpu_s'])} | {added} |")
    print()
if fan:
    print("| run | path | sessions x items | notif/s | expected/s | missing % | min-max per s | skips / repeats | publish lat p50/p99 ms | source lat p50/p99 ms | errors | gateway CPU % | field CPU % | field sent / recv B/s (segs/s) | client CPU % |")
    print("|---:|---|---|---:|---:|---:|---|---|---|---|---:|---:|---:|---|---:|")
    for r in fan:
        if r.get("failed"):
            print(f"| {r['rep']} | {r['label']} | | FAILED | | | | | | | | | | | |")
            continue
        errors = r["bad_status"] + r["not_u32"] + r["status_changes"] + r["seq_gaps"] + r["sessions_lost"]
        g = lambda v: "n/a" if v is None else f"{v:.1f}"
        gw = "-" if r["label"] == "direct" else g(r["server_cpu_pct"])
        fc = g(r.get("field_cpu_pct"))
        io = f"{r.get('field_sent_bytes_per_s')} / {r.get('field_received_bytes_per_s')} ({r.get('field_segs_out_per_s')} / {r.get('field_segs_in_per_s')})"
        print(f"| {r['rep']} | {r['label']} | {r['sessions']} x {r['items']} | {r['notif_per_s']:.0f} | {r['expected_per_s']:.0f} | "
              f"{r['missing_pct']:.1f} | {r['per_s_min']}-{r['per_s_max']} | {r['value_skips']} / {r['value_repeats']} | "
              f"{g(r['publish_lat_p50_ms'])} / {g(r['publish_lat_p99_ms'])} | {g(r['source_lat_p50_ms'])} / {g(r['source_lat_p99_ms'])} | "
              f"{errors} | {gw} | {fc} | {io} | {g(r['client_cpu_pct'])} |")
PY
echo
echo "Pinning: $PIN. Load average (1/5/15 min) before: $LOAD0, after: $LOAD1."
echo "Raw results: $READ_RESULTS $FANOUT_RESULTS; server logs in $OUT."
