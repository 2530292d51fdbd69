#!/usr/bin/env bash
# Builds libtracer.so and tracer, traces a real program (python3 building a dict),
# and prints the report. Usage: scripts/demo.sh [CMD ARGS...]
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --workspace
out=$(mktemp -d)
if [ $# -eq 0 ]; then
  py=/usr/bin/python3; [ -x "$py" ] || py=python3
  set -- "$py" -c 'd = {str(i): [i] * 3 for i in range(20000)}; print(len(d))'
fi
target/release/tracer run --output "$out/demo" -- "$@"
for f in "$out"/demo*.mlyze; do
  target/release/tracer report "$f"
done
