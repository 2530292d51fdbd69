#!/usr/bin/env bash
# The whole test suite: builds the release artifacts first (the end-to-end tests
# preload target/release/libtracer.so and run target/release/tracer), then runs
# every test of the workspace against them, and closes with one line adding up
# every test binary's results.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --workspace --all-targets
log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
cargo test --release --workspace "$@" 2>&1 | tee "$log" || status=$?
awk '/^test result:/ {
        for (i = 1; i <= NF; i++) {
            if ($(i+1) ~ /^passed/)  p += $i
            if ($(i+1) ~ /^failed/)  f += $i
            if ($(i+1) ~ /^ignored/) s += $i
        }
     }
     END { printf "summary: %d passed, %d failed, %d skipped\n", p, f, s }' "$log"
exit "$status"
