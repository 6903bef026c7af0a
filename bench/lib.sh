# Shared by the bench/run-*.sh scripts (sourced, not run): background server
# processes that are stopped on exit, and `start`, which waits for a server's
# READY line, and `release_bins`, which builds the release binaries (or takes
# them from $BIN_DIR). Needs $OUT (the output directory) to be set.

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

# release_bins CARGO_BUILD_ARGS... : set BIN to the directory of the release
# binaries. With BIN_DIR set, the binaries already there are used and nothing
# is built, e.g. BIN_DIR=/work/wt-bench/target/release to measure another
# commit (a worktree built with its own target dir) with this checkout's
# scripts. Otherwise `cargo build --release CARGO_BUILD_ARGS...` runs in
# $ROOT and BIN is its target/release ($CARGO_TARGET_DIR/release if set).
release_bins() {
    if [ -n "${BIN_DIR:-}" ]; then
        BIN="$(cd "$BIN_DIR" && pwd)"
        echo "using the binaries in $BIN (BIN_DIR; not building)" >&2
        return 0
    fi
    echo "building release binaries..." >&2
    (cd "$ROOT" && cargo build --release "$@" >&2)
    case "${CARGO_TARGET_DIR:-}" in
    "") BIN="$ROOT/target/release" ;;
    /*) BIN="$CARGO_TARGET_DIR/release" ;;
    *) BIN="$ROOT/$CARGO_TARGET_DIR/release" ;;
    esac
}
