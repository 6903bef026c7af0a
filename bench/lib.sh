# Shared by the bench/run-*.sh scripts (sourced, not run): background server
# processes that are stopped on exit, and `start`, which waits for a server's
# READY line. Needs $OUT (the output directory) to be set.

PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do
        kill "$p" 2>/dev/null || true
    done
    for p in "${PIDS[@]}"; do
        wait "$p" 2>/dev/null || true
    done
}
trap cleanup EXIT INT TERM

# start NAME CMD... : start a server in the background, wait for its READY
# line, set STARTED_PID and STARTED_URL.
start() {
    local name="$1"
    shift
    "$@" >"$OUT/$name.out" 2>"$OUT/$name.err" &
    STARTED_PID=$!
    PIDS+=("$STARTED_PID")
    for _ in $(seq 1 600); do
        if grep -q '^READY opc.tcp=' "$OUT/$name.out" 2>/dev/null; then
            STARTED_URL="$(sed -n 's/^READY opc.tcp=//p' "$OUT/$name.out" | head -n1)"
            return 0
        fi
        if ! kill -0 "$STARTED_PID" 2>/dev/null; then
            echo "$name exited before READY:" >&2
            cat "$OUT/$name.err" >&2
            exit 1
        fi
        sleep 0.1
    done
    echo "$name did not become ready in 60 s" >&2
    exit 1
}
