#!/usr/bin/env bash
# Many-sessions benchmark driver (issue 21, "10,000 sessions").
#
# Builds the release binaries (under `flock /tmp/uagate-bench.lock`, the
# machine's benchmark lock), writes a uagate configuration for N sessions,
# checks it with `uagate plan`, starts `uagate run` on a temp data dir
# (opc.tcp on a loopback ephemeral port, demo nodes on) and runs
# `uagate-bench-sessions` against it: N sessions, each on its own TCP
# connection and secure channel, ramped at RATE/s, one subscription of 10
# monitored items each (publishing 1 s, keep-alive count 10, sampling 1 s,
# the counter 0.5 s, queue 1), two Publish requests outstanding; one session in DATA_EVERY
# monitors the demo Counter (a data message every second), the others only
# the static demo Setpoint (keep-alives every 10 s). A fresh probe session
# from 127.0.0.2 (another owner than the sessions' 127.0.0.1) measures Read
# latency before the ramp (idle) and with all sessions up (loaded). See
# `uagate-bench-sessions --help` and its module documentation for exactly
# what is counted as late, a gap or an error.
#
# File descriptors: the gateway needs one per connection plus its own
# (listeners, SQLite, logs): about N + 300, and it raises its soft
# RLIMIT_NOFILE to the hard limit at start. The generator needs about
# N + 50. This script checks `ulimit -n` (soft; it raises it to the hard
# limit first) against N + 300 and stops with a message when it is too low
# (raise the hard limit, e.g. `ulimit -Hn 20000` as root or LimitNOFILE=
# in a systemd unit). The N connections also need N local ports towards
# the server: 10,000 fit in Linux's default ip_local_port_range
# (32768-60999).
#
# Usage: bench/run-sessions.sh [N]                 (default 1000)
# Env:   RATE=200 (sessions/s)  HOLD=60 (s)  PROBE_SECS=30  DATA_EVERY=10
#        ITEMS=10  SESSIONS_EXTRA="--slack-ms 1000 ..." (more generator flags)
#        UAGATE_EXTRA=<TOML appended to uagate's configuration>
#        BIN_DIR=<dir with uagate and uagate-bench-sessions> (build nothing)
#        GEN_DIR=<dir with uagate-bench-sessions> (default: BIN_DIR)
#        OUT=<dir for logs and results> (default: a new temp dir)
#        LOCK="flock /tmp/uagate-bench.lock" (the default; empty: no lock)
# Results: one JSON line appended to $OUT/sessions.jsonl, a Markdown table.
# This is a measurement, not a test: nothing here asserts on timings.
set -euo pipefail

N="${1:-1000}"
RATE="${RATE:-200}"
HOLD="${HOLD:-60}"
PROBE_SECS="${PROBE_SECS:-30}"
DATA_EVERY="${DATA_EVERY:-10}"
ITEMS="${ITEMS:-10}"
# The machine's benchmark lock, taken for the build and for the load run
# (not for the whole script: do not wrap the script in the same flock, it
# would wait for itself). LOCK= (empty) takes no lock.
LOCK="${LOCK-flock /tmp/uagate-bench.lock}"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
OUT="${OUT:-$(mktemp -d /tmp/uagate-sessions.XXXXXX)}"
mkdir -p "$OUT"
CLK_TCK="$(getconf CLK_TCK 2>/dev/null || echo 100)"

# File descriptors: raise the soft limit to the hard one, then check.
NEED=$((N + 300))  # N + 10 + 13 channels plus the gateway's own 256
ulimit -Sn "$(ulimit -Hn)" 2>/dev/null || true
SOFT="$(ulimit -Sn)"
if [ "$SOFT" != unlimited ] && [ "$SOFT" -lt "$NEED" ]; then
    echo "ulimit -n is $SOFT (hard $(ulimit -Hn)); $N sessions need at least $NEED open files" \
        "in the gateway and in the generator. Raise the hard limit (as root: ulimit -Hn $NEED," \
        "or LimitNOFILE= / /etc/security/limits.conf) and run again." >&2
    exit 1
fi

# Background servers stopped on exit, and `start` (waits for READY).
. "$ROOT/bench/lib.sh"
if [ -n "${BIN_DIR:-}" ]; then
    BIN="$(cd "$BIN_DIR" && pwd)"
    echo "using the binaries in $BIN (BIN_DIR; not building)" >&2
else
    # A fat-LTO release build takes minutes on two cores: one at a time.
    echo "building release binaries..." >&2
    $LOCK nice -n 10 bash -c \
        "cd '$ROOT' && cargo build --release -p uagate --bin uagate >&2 &&
         cargo build --release -p uagate-bench --bin uagate-bench-sessions >&2"
    case "${CARGO_TARGET_DIR:-}" in
    "") BIN="$ROOT/target/release" ;;
    /*) BIN="$CARGO_TARGET_DIR/release" ;;
    *) BIN="$ROOT/$CARGO_TARGET_DIR/release" ;;
    esac
fi
# The generator may come from elsewhere than the gateway (GEN_DIR), e.g. to
# measure an older gateway build with this generator.
GEN="${GEN_DIR:-$BIN}/uagate-bench-sessions"

# The configuration N sessions imply: max_session_count = N + 10 (room for
# the probe, a fresh client, beside the N sessions); a session per
# channel, so max_channel_count = sessions + 3 (balanced reserves one
# bootstrap and one reconnect channel and the plan wants one more shared
# than sessions) + 10 spare; the parked-Publish stage is sized from
# max_session_count by the plan. The connection rate limiter stays at its
# defaults (500/s, burst 1000) above the ramp rate.
MAX_SESSIONS=$((N + 10))
DATA="$OUT/uagate-data"
cat >"$OUT/uagate.toml" <<EOF
[listen]
opc_tcp = "127.0.0.1:0"

[server]
application_name = "uagate-sessions"
max_session_count = $MAX_SESSIONS
max_channel_count = $((MAX_SESSIONS + 13))
max_concurrent_session_establishment = 64
demo_nodes = true

[isolation]
mode = "balanced"
EOF
if [ -n "${UAGATE_EXTRA:-}" ]; then printf '\n%s\n' "$UAGATE_EXTRA" >>"$OUT/uagate.toml"; fi
echo "configuration ($OUT/uagate.toml), checked by uagate plan:" >&2
"$BIN/uagate" plan --config "$OUT/uagate.toml" >&2
"$BIN/uagate" --data "$DATA" config import "$OUT/uagate.toml" >&2

RUST_LOG="${RUST_LOG:-warn}" start uagate "$BIN/uagate" --data "$DATA" run
UAGATE_PID=$STARTED_PID
UAGATE_URL=$STARTED_URL
echo "uagate $UAGATE_URL (pid $UAGATE_PID), open files limit $(awk '/Max open files/ {print $4 "/" $5}' /proc/$UAGATE_PID/limits)" >&2
sleep 2

RESULTS="$OUT/sessions.jsonl"
LOAD0="$(cut -d' ' -f1-3 /proc/loadavg)"
# shellcheck disable=SC2086
$LOCK "$GEN" --endpoint "$UAGATE_URL" \
    --sessions "$N" --rate "$RATE" --hold "$HOLD" --probe-secs "$PROBE_SECS" \
    --data-every "$DATA_EVERY" --items "$ITEMS" --probe-src 127.0.0.2 \
    --server-pid "$UAGATE_PID" --clk-tck "$CLK_TCK" ${SESSIONS_EXTRA:-} \
    >>"$RESULTS" 2> >(tee "$OUT/generator.err" >&2)
LOAD1="$(cut -d' ' -f1-3 /proc/loadavg)"
# The gateway after the generator's connections closed: does memory come back?
sleep 10
RSS_AFTER="$(awk '/VmRSS/ {print $2}' /proc/$UAGATE_PID/status)"

python3 - "$RESULTS" "$RSS_AFTER" <<'PY'
import json, sys
r = [json.loads(l) for l in open(sys.argv[1]) if l.strip()][-1]
after = int(sys.argv[2])
mib = lambda k: "n/a" if k is None else f"{k/1024:.0f}"
f = lambda v, d=1: "n/a" if v is None else f"{v:.{d}f}"
h = r["hold"]
print("| sessions (up/asked) | ramp s | RSS idle / loaded / max / after close MiB | KiB per session "
      "| server CPU % | data msgs/s | keep-alives/s | notif/s | late keep-alives | late data "
      "| stale values | seq gaps | errors | lag p50/p99/max ms | probe Read p50/p99 ms idle | loaded "
      "| client CPU % / RSS MiB |")
print("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|---|---|")
errors = h["bad_publish"] + h["status_changes"] + h["lost"] + r["open_failures"]
pi, pl = r["probe_idle"], r["probe_loaded"]
print(f"| {r['sessions_up_end']}/{r['sessions']} | {r['ramp_s']:.0f} | "
      f"{mib(r['server_rss_idle_kib'])} / {mib(r['server_rss_loaded_kib'])} / "
      f"{mib(r['server_rss_max_kib'])} / {mib(after)} | {f(r['rss_per_session_kib'])} | "
      f"{f(r['server_cpu_pct'], 0)} | {r['data_msgs_per_s']:.0f} | {r['keepalives_per_s']:.0f} | "
      f"{r['notifications_per_s']:.0f} | {h['late_keepalives']} | {h['late_data']} | "
      f"{h['stale_values']} | {h['seq_gaps']} | {errors} | "
      f"{r['lag_p50_ms']} / {r['lag_p99_ms']} / {r['lag_max_ms']} | "
      f"{pi['p50_ms']:.2f} / {pi['p99_ms']:.2f} | {pl['p50_ms']:.2f} / {pl['p99_ms']:.2f} | "
      f"{f(r['client_cpu_pct'], 0)} / {mib(r['client_rss_kib'])} |")
rr = r["ramp"]
print()
print(f"During ramp + settle: late keep-alives {rr['late_keepalives']}, late data {rr['late_data']}, "
      f"seq gaps {rr['seq_gaps']}, bad publish {rr['bad_publish']}, lost {rr['lost']}, "
      f"open failures {r['open_failures']} {r['open_failure_samples']}")
PY
echo
echo "Load average (1/5/15 min) before: $LOAD0, after: $LOAD1."
echo "Raw results: $RESULTS; logs in $OUT"
