#!/usr/bin/env bash
# The one test command: set-up, build, Rust tests, then the interop suites (Python asyncua,
# node-opcua) and the console's browser tests (headless Chromium) against the freshly built
# uagate binary, then the appliance image built and booted under QEMU (image/test) with a
# ten-minute soak with field faults (tests/soak/run.sh) running beside it. Every step is bounded
# in time.
# Exit status is non-zero if any step failed; the last line summarises the steps.
#
# Environment:
#   UAGATE_BIN             binary the interop suites start (default: <target>/debug/uagate)
#   UAGATE_INTEROP_TARGET  uagate (default) | asyncua-server (harness self-check)
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

export UAGATE_BIN="${UAGATE_BIN:-${CARGO_TARGET_DIR:-$ROOT/target}/debug/uagate}"
export UAGATE_INTEROP_TARGET="${UAGATE_INTEROP_TARGET:-uagate}"
# A clean clone gains nothing from incremental compilation, and its caches were a third of the
# target directory (2 GB of 6): off unless the caller asks for it.
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"

results=()
failed=0

# record NAME RC TOOK LIMIT: records the step's outcome as ok/FAILED; returns RC.
record() {
  local name="$1" rc="$2" took="$3" limit="$4"
  if [ "$rc" -eq 0 ]; then
    results+=("$name ok (${took}s)")
  else
    [ "$rc" -eq 124 ] && printf '=== %s: timed out after %s\n' "$name" "$limit"
    results+=("$name FAILED rc=$rc (${took}s)")
    failed=$((failed + 1))
  fi
  return "$rc"
}

# step NAME MAX_DURATION CMD...: runs CMD under `timeout`, records ok/FAILED.
step() {
  local name="$1" limit="$2"
  shift 2
  printf '\n=== %s: %s\n' "$name" "$*"
  local start=$SECONDS rc=0
  timeout --kill-after=30s "$limit" "$@" || rc=$?
  record "$name" "$rc" $((SECONDS - start)) "$limit"
}

# step_bg NAME MAX_DURATION CMD...: starts CMD under `timeout` in the background, its output kept
# in a file; step_wait NAME waits for it, prints that output and records ok/FAILED as `step` does.
declare -A bg_pid bg_log bg_limit
step_bg() {
  local name="$1" limit="$2"
  shift 2
  printf '\n=== %s (in the background, its output follows when it ends): %s\n' "$name" "$*"
  bg_log[$name]="$(mktemp)"
  bg_limit[$name]="$limit"
  # Its own duration goes next to its output: waiting for it may come later than its end.
  (
    start=$SECONDS
    timeout --kill-after=30s "$limit" "$@"
    rc=$?
    echo $((SECONDS - start)) >"${bg_log[$name]}.took"
    exit "$rc"
  ) >"${bg_log[$name]}" 2>&1 &
  bg_pid[$name]=$!
}
step_wait() {
  local name="$1" rc=0
  wait "${bg_pid[$name]}" || rc=$?
  printf '\n=== %s: output\n' "$name"
  cat "${bg_log[$name]}"
  local took
  took="$(cat "${bg_log[$name]}.took" 2>/dev/null || echo '?')"
  rm -f "${bg_log[$name]}" "${bg_log[$name]}.took"
  record "$name" "$rc" "$took" "${bg_limit[$name]}"
}

summary() {
  local IFS=';'
  printf '\n=== test.sh summary: %s\n' "${results[*]}"
  if [ "$failed" -eq 0 ]; then
    echo "test.sh: ALL STEPS PASSED"
  else
    echo "test.sh: $failed STEP(S) FAILED"
  fi
}

# Set-up and build: nothing after them makes sense if they fail. The build step builds the test
# targets too, with the same feature set the test step uses: building the binaries alone first
# resolved the dependencies' features differently and compiled many of them twice (disk and time).
if command -v cargo-nextest >/dev/null 2>&1; then
  build=(cargo nextest run --workspace --no-run)
  # Every test runs even after a failure, so that one failure does not hide others.
  tests=(cargo nextest run --workspace --no-tests=warn --no-fail-fast)
else
  build=(cargo test --workspace --no-run)
  tests=(cargo test --workspace --no-fail-fast)
fi
# The soak's field server and wss/https client are built here too, so that the soak starts at once.
# With the gateway in one build: it reuses the test build's crates (tests/soak/run.sh says why).
soak_bins=(cargo build -p uagate -p uagate-bench --bin uagate --bin opcua-ref-server --bin uagate-bench-transports)
if ! step setup 20m bash scripts/test-setup.sh || ! step build 45m "${build[@]}" \
  || ! step build-soak 20m "${soak_bins[@]}"; then
  summary
  exit 1
fi

step build-reuse 10m bash scripts/check-build-reuse.sh
step rust 30m "${tests[@]}"

if [ "$UAGATE_INTEROP_TARGET" = "uagate" ] && [ ! -x "$UAGATE_BIN" ]; then
  echo "note: $UAGATE_BIN does not exist after the build; the interop suites will fail"
fi
step interop-python 20m .venv/bin/python -m pytest tests/interop/python
step interop-node 20m node --test tests/interop/node/
step browser 15m node --test tests/browser/
# Ten minutes of mixed load with field faults (issue 21 item 2; bench/run-soak.sh runs an hour).
# It runs beside the image step: the soak is ten minutes of wall-clock time at a small load (a few
# dozen requests a second), the image step is CPU work and QEMU boots, and in sequence the two
# were half of a clean run. Its checks are on leaks, gaps and recovery within 30 s, not on speed.
step_bg soak 15m bash tests/soak/run.sh 10
# The appliance image, booted under QEMU: its own step, where its tools are (the set-up installs
# them from Debian packages). It takes the test build's binary: a release build (fat LTO) of a
# clean clone would add a quarter of an hour; `image/build` alone makes the release image.
if command -v qemu-system-x86_64 >/dev/null 2>&1 && command -v mmdebstrap >/dev/null 2>&1; then
  step image 45m image/test --bin "$UAGATE_BIN"
else
  echo "=== image: skipped (no qemu-system-x86_64 or mmdebstrap; scripts/test-setup.sh installs them)"
fi
step_wait soak

summary
[ "$failed" -eq 0 ]
