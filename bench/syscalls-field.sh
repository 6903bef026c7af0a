#!/usr/bin/env bash
# Syscalls, context switches and CPU per Read of the process in the middle
# (issue 16, proxy cost): runs bench/run-field.sh with RELAY=1 and, during
# the measured window of the gateway cell and of the relay cell, counts with
# `perf stat` (software events and syscall tracepoints only) what that
# process does (in the first node set's cells). Divide the counts by the
# cell's req/s x PERF_SECS.
#
# Usage: bench/syscalls-field.sh            (release binaries in target/release)
# Env:   SETS="1" (READ_SETS of run-field.sh)  PIN=none  PERF_SECS=4
#        BIN_DIR=<dir>  GW_ENV="..." (passed to run-field.sh)
# This is a measurement, not a test: nothing here asserts on timings.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
OUT="${OUT:-$(mktemp -d /tmp/uagate-syscalls.XXXXXX)}"
PERF_SECS="${PERF_SECS:-4}"
LOG="$OUT/run-field.log"
EV=context-switches,cpu-migrations,task-clock
for s in sendto recvfrom epoll_wait futex setsockopt write; do EV="$EV,syscalls:sys_enter_$s"; done
command -v perf >/dev/null || { echo "perf is needed" >&2; exit 1; }
cd "$ROOT"
BIN_DIR="${BIN_DIR:-target/release}" FIELD=ref PIN="${PIN:-none}" RELAY=1 SKIP_FANOUT=1 \
    READ_SETS="${SETS:-1}" REPEAT=1 OUT="$OUT/field" bench/run-field.sh 8 >"$LOG" 2>&1 &
RUN=$!
for cell in gateway relay; do
    for _ in $(seq 1 600); do grep -q "read run 1: $cell" "$LOG" 2>/dev/null && break; sleep 0.1; done
    PID=$(grep -o "$cell opc.tcp://[^ ]* (pid [0-9]*" "$LOG" | grep -o '[0-9]*$')
    sleep 3 # past run-field.sh's 2 s warm-up
    perf stat -e "$EV" -p "$PID" -o "$OUT/perf-stat-$cell.txt" -- sleep "$PERF_SECS"
done
wait "$RUN"
grep '^| ' "$LOG"
for cell in gateway relay; do
    echo "== $cell ($PERF_SECS s of its read cell)"
    grep -v '^#' "$OUT/perf-stat-$cell.txt" | grep -v '^$'
done
