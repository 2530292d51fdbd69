#!/usr/bin/env bash
# The whole test suite: builds the release artifacts first (the end-to-end tests
# preload target/release/libtracer.so and run target/release/tracer), then runs
# every test of the workspace against them.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --workspace --all-targets
cargo test --release --workspace "$@"
