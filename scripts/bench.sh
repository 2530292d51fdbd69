#!/usr/bin/env bash
# Benchmarks libtracer side by side with the untraced program and heaptrack.
#
# Usage: scripts/bench.sh [--quick]
#
# Recording overhead: each workload runs untraced, under libtracer.so (mlyze, the
# default) and under heaptrack's recorder (`heaptrack -r`, preload and raw
# recording only), RUNS times each, interleaved, in one go; the median wall
# time and the median peak RSS (GNU time, %M: largest process of the run) are
# printed with the ratios to the untraced run.
#
# Decoding: the allocation workload with 5M pairs (10M events) is recorded once
# as mlyze, once as dumpalloc and once by heaptrack; `tracer report` and
# `heaptrack_print` then read them, and events per second are printed with the
# bytes each format spends per event.
#
# Prints markdown tables on stdout; docs/performance.md holds the latest figures.
set -euo pipefail
cd "$(dirname "$0")/.."
quick=0
[ "${1:-}" = "--quick" ] && quick=1
RUNS=${RUNS:-5}
[ $quick = 1 ] && RUNS=3

cargo build --release --workspace >&2
LIB=$PWD/target/release/libtracer.so
TRACER=$PWD/target/release/tracer
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

cc=${CC:-gcc}
$cc -O2 -g -fno-omit-frame-pointer -pthread examples/bench/alloc_chain.c -o "$work/chain_fp"
$cc -O2 -g -fomit-frame-pointer -pthread examples/bench/alloc_chain.c -o "$work/chain_nofp"
$cc -O2 -g examples/bench/syscall_loop.c -o "$work/syscall_loop"
$cc -O2 -g -fno-omit-frame-pointer examples/bench/many_stacks.c -o "$work/many_stacks"
$cc -O0 -g -pthread examples/many_threads.c -o "$work/many_threads"
$cc -O0 -g examples/plugin_loop.c -o "$work/plugin_loop"
$cc -O0 -g -fno-omit-frame-pointer -shared -fPIC examples/plugins/plug_a.c -o "$work/plug_a.so"
$cc -O2 -g -fomit-frame-pointer -shared -fPIC examples/plugins/plug_b.c -o "$work/plug_b.so"

# A history of 3,000 commits (3 files changed in each, 200 files in 10
# directories) for `git log --stat`, made with fast-import: no network.
git init -q -b main "$work/repo"
python3 - <<'PY' | (cd "$work/repo" && git fast-import --quiet && git checkout -q -f main)
import sys
out = sys.stdout
for c in range(3000):
    msg = f"change {c}\n"
    out.write(f"commit refs/heads/main\ncommitter Bench <bench@example.com> {1700000000 + c * 60} +0000\n")
    out.write(f"data {len(msg)}\n{msg}")
    for k in range(3):
        f = (c * 7 + k * 13) % 200
        body = "".join(f"line {i} of file {f} at commit {c if i % 5 == k else 0}\n" for i in range(40))
        out.write(f"M 644 inline src/dir{f % 10}/file{f}.txt\ndata {len(body)}\n{body}")
    out.write("\n")
PY

# LeakSanitizer's runtime, preloaded: what a leak check alone costs.
LSAN=$(ls /usr/lib/x86_64-linux-gnu/liblsan.so.0 2>/dev/null || true)
have_heaptrack=0
command -v heaptrack >/dev/null && have_heaptrack=1

# measure TAG CMD...: one run, appends "TAG wall_seconds max_rss_kib" to $work/times.
# The wall time is taken around GNU time with the shell's nanosecond clock
# (GNU time's own %e counts in 10 ms steps: a 20 ms run would read 0.02 or
# 0.03); GNU time gives the peak RSS.
measure() {
    local tag=$1; shift
    local d="$work/run-$tag"
    rm -rf "$d"; mkdir -p "$d"
    local t0 t1
    t0=$(date +%s%N)
    ( cd "$d" && /usr/bin/time -f "%M" -o "$d/time" "$@" >/dev/null 2>"$d/stderr" ) || {
        echo "bench: '$*' failed under $tag:" >&2; cat "$d/stderr" >&2; return 1; }
    t1=$(date +%s%N)
    echo "$tag $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.4f", (b - a) / 1e9 }') $(tail -n 1 "$d/time")" >> "$work/times"
}

# workload NAME "VAR=VALUE ..." CMD...: RUNS interleaved rounds of untraced /
# libtracer / heaptrack. The variables are set for the program in all three runs
# (not passed through `env` as a program: heaptrack would then trace `env` alone,
# as it removes its preload from the environment of the programs it starts).
workload() {
    local name=$1 vars=$2; shift 2
    : > "$work/times"
    for _ in $(seq "$RUNS"); do
        # shellcheck disable=SC2086
        measure base env $vars "$@"
        # shellcheck disable=SC2086
        measure libtracer env $vars LD_PRELOAD="$LIB" TRACER_QUIET=1 TRACER_OUTPUT="trace" "$@"
        if [ -n "$LSAN" ]; then
            # Leak checking only (no record); a leak report must not fail the run.
            # shellcheck disable=SC2086
            measure lsan env $vars LD_PRELOAD="$LSAN" LSAN_OPTIONS=exitcode=0 "$@" || true
        fi
        if [ $have_heaptrack = 1 ]; then
            # shellcheck disable=SC2086
            measure heaptrack env $vars heaptrack -r -o "$work/run-heaptrack/ht" "$@"
        fi
    done
    python3 - "$name" "$work/times" <<'PY'
import statistics, sys
name, path = sys.argv[1], sys.argv[2]
rows = {}
for line in open(path):
    tag, wall, rss = line.split()
    rows.setdefault(tag, []).append((float(wall), int(rss)))
base_w = statistics.median(w for w, _ in rows["base"])
base_m = statistics.median(m for _, m in rows["base"])
cells = [name, f"{base_w*1000:.0f} ms, {base_m/1024:.1f} MiB"]
for tag in ("libtracer", "heaptrack", "lsan"):
    if tag not in rows:
        cells.append("n/a"); continue
    w = statistics.median(w for w, _ in rows[tag]); m = statistics.median(m for _, m in rows[tag])
    ratio = f"{w/base_w:.2f}x" if base_w > 0 else "n/a"
    cells.append(f"{ratio} ({w*1000:.0f} ms), {m/1024:.1f} MiB (+{(m-base_m)/1024:.1f})")
print("| " + " | ".join(cells) + " |")
PY
}

echo "## Recording overhead (median of $RUNS runs; wall time ratio to untraced, peak RSS)"
echo
echo "| workload | untraced | libtracer | heaptrack -r | LeakSanitizer (preloaded) |"
echo "| --- | --- | --- | --- | --- |"
PY=/usr/bin/python3
[ -x $PY ] || PY=$(command -v python3)
workload "alloc_chain 1M pairs, 20 deep, frame pointers" "" "$work/chain_fp" 1000000
workload "alloc_chain 1M pairs, 20 deep, no frame pointers" "" "$work/chain_nofp" 1000000
workload "alloc_chain 1M pairs, 2 threads" "" "$work/chain_fp" 1000000 2
workload "alloc_chain 1M pairs, 4 threads" "" "$work/chain_fp" 1000000 4
workload "many_threads: 1,000 threads at once, 1.28M events" "" "$work/many_threads" 1000
workload "plugin_loop: 2,000 dlopen/dlclose of two plugins in turn" "" "$work/plugin_loop" "$work/plug_a.so" "$work/plug_b.so" 1000
workload "python3 300k-entry dict, PYTHONMALLOC=malloc" "PYTHONMALLOC=malloc PYTHONHASHSEED=0" $PY -c 'd = {str(i): i for i in range(300000)}'
workload "perl 300k-entry hash" "" /usr/bin/perl -e 'my %h; $h{$_} = $_ for 1..300000;'
workload "ls -l /usr/bin (short process)" "" /bin/ls -l /usr/bin
# Every process of the compiler driver traced (g++, cc1plus, as); Debian's
# cc1plus is built without frame pointers.
workload "g++ -O1 -c examples/bench/templates.cpp" "" g++ -O1 -c "$PWD/examples/bench/templates.cpp" -o templates.o
workload "git log --stat, 3,000 commits" "" git -C "$work/repo" log --stat
echo

echo "## A million distinct stacks (examples/bench/many_stacks: 2^20 allocations, each from its own 20-deep stack)"
echo
echo "| step | wall | peak RSS | file |"
echo "| --- | --- | --- | --- |"
one() {
    local label=$1 file=$2; shift 2
    /usr/bin/time -f "%e %M" -o "$work/one" "$@" >/dev/null 2>"$work/one.err" || {
        echo "bench: '$*' failed:" >&2; cat "$work/one.err" >&2; return 1; }
    read -r wall rss < "$work/one"
    local size="-"
    [ -n "$file" ] && size="$(stat -c %s "$file") bytes"
    echo "| $label | $wall s | $((rss / 1024)) MiB | $size |"
}
one "untraced" "" "$work/many_stacks"
rm -f "$work"/ms*.mlyze
one "libtracer (program + writer)" "$work/ms.mlyze" env LD_PRELOAD="$LIB" TRACER_QUIET=1 TRACER_OUTPUT="$work/ms" "$work/many_stacks"
one "tracer report" "" "$TRACER" report "$work/ms.mlyze"
if [ $have_heaptrack = 1 ]; then
    one "heaptrack -r" "" heaptrack -r -o "$work/ms-ht" "$work/many_stacks"
fi
rm -f "$work"/ms*.mlyze "$work"/ms-ht*
echo

echo "## Syscall capture (median of $RUNS runs; 800k small reads and writes on a pipe and a file)"
echo
echo "| workload | untraced | libtracer (TRACER_FORMAT=tlv, all groups) | strace -f |"
echo "| --- | --- | --- | --- |"
: > "$work/times"
for _ in $(seq "$RUNS"); do
    measure base "$work/syscall_loop" 200000
    measure libtracer env LD_PRELOAD="$LIB" TRACER_QUIET=1 TRACER_FORMAT=tlv TRACER_SYSCALLS=all TRACER_OUTPUT="trace" "$work/syscall_loop" 200000
    if command -v strace >/dev/null; then
        measure strace strace -f -o /dev/null "$work/syscall_loop" 200000
    fi
done
python3 - "$work/times" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    tag, wall, rss = line.split()
    rows.setdefault(tag, []).append(float(wall))
base = statistics.median(rows["base"])
cells = ["syscall_loop 200k rounds", f"{base*1000:.0f} ms"]
for tag in ("libtracer", "strace"):
    if tag in rows:
        w = statistics.median(rows[tag]); cells.append(f"{w/base:.2f}x ({w*1000:.0f} ms)")
    else:
        cells.append("n/a")
print("| " + " | ".join(cells) + " |")
PY
echo

echo "## Decoding (10M events: alloc_chain 5M pairs)"
echo
pairs=5000000
( cd "$work" && LD_PRELOAD="$LIB" TRACER_QUIET=1 TRACER_OUTPUT="$work/big" "$work/chain_fp" $pairs >/dev/null )
( cd "$work" && LD_PRELOAD="$LIB" TRACER_QUIET=1 TRACER_FORMAT=dumpalloc TRACER_OUTPUT="$work/big" "$work/chain_fp" $pairs >/dev/null )
echo "| reader | file | bytes | bytes/event | seconds | events/s |"
echo "| --- | --- | --- | --- | --- | --- |"
decode() {
    local label=$1 file=$2 events=$3; shift 3
    python3 - "$label" "$file" "$events" "$@" <<'PY'
import os, subprocess, sys, time
label, path, events, cmd = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4:]
size = os.path.getsize(path)
t0 = time.monotonic()
subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
t = time.monotonic() - t0
print(f"| {label} | {os.path.basename(path)} | {size} | {size/events:.2f} | {t:.2f} | {events/t/1e6:.1f} M |")
PY
}
events=$((2 * pairs))
decode "tracer report" "$work/big.mlyze" $events "$TRACER" report "$work/big.mlyze"
decode "tracer report" "$work/big.dumpalloc" $events "$TRACER" report "$work/big.dumpalloc"
if [ $have_heaptrack = 1 ]; then
    ( cd "$work" && heaptrack -o "$work/ht-big" "$work/chain_fp" $pairs >/dev/null 2>&1 )
    ht=$(ls "$work"/ht-big*.zst | head -1)
    decode "heaptrack_print" "$ht" $events heaptrack_print "$ht"
fi
