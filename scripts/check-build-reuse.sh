#!/usr/bin/env bash
# After the test build: building the gateway binary the way `cargo run -- demo` does must reuse
# every crate the test build compiled (same dependency features; see the feature-alignment
# dependencies in Cargo.toml). Fails listing the crates it would compile again.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
cargo build --bin uagate --message-format=json 2>/dev/null | python3 -c '
import json, sys
again = []
for line in sys.stdin:
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if m.get("reason") == "compiler-artifact" and not m.get("fresh"):
        again.append(m["target"]["name"])
if again:
    print("cargo run -- demo would compile again after the tests: " + ", ".join(again))
    print("align their features: see the feature-alignment dependencies in Cargo.toml")
    sys.exit(1)
print("cargo run -- demo reuses every crate the test build compiled")
'
