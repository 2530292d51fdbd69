#!/usr/bin/env python3
"""Syscall capture overhead (issue 4's bar): `syscall_loop 200000` (800k small
reads and writes on a pipe and a file) untraced, under libtracer with every
group captured, and under `strace -f`, interleaved, in one go.

Usage: python3 scripts/bench_syscalls.py [--runs N] [--strace-runs M]

Each round runs, in this order:
  untraced      the program alone
  idle thread   the program with examples/bench/idle_thread.c preloaded: one
                extra thread that only sleeps (what any second thread costs
                the program's system calls on this kernel, tracer or not)
  libtracer     TRACER_FORMAT=tlv TRACER_SYSCALLS=all
and, in the first M rounds (strace is ~60x slower), strace -f -o /dev/null.
Wall time is taken around the whole process (start-up, exit and the trace
file's completion included). Prints a markdown table: median wall time, the
ratio of medians to untraced, and the range of the ratio within rounds.
Run it on a quiet machine: on 2 cores, other processes take the core the
writer thread uses, and the wall time says little then.
"""
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main(argv):
    runs, strace_runs = 21, 2
    while argv:
        if argv[0] == "--runs":
            runs = int(argv[1])
        elif argv[0] == "--strace-runs":
            strace_runs = int(argv[1])
        else:
            sys.exit(__doc__)
        argv = argv[2:]
    subprocess.run(["cargo", "build", "--release", "-p", "tracer-preload"],
                   cwd=ROOT, check=True, stdout=sys.stderr)
    lib = os.path.join(ROOT, "target/release/libtracer.so")
    work = tempfile.mkdtemp(prefix="bench-syscalls-")
    try:
        prog = os.path.join(work, "syscall_loop")
        idle = os.path.join(work, "idle_thread.so")
        cc = os.environ.get("CC", "gcc")
        subprocess.run([cc, "-O2", "-g", os.path.join(ROOT, "examples/bench/syscall_loop.c"),
                        "-o", prog], check=True)
        subprocess.run([cc, "-O2", "-shared", "-fPIC", "-pthread",
                        os.path.join(ROOT, "examples/bench/idle_thread.c"), "-o", idle],
                       check=True)
        have_strace = shutil.which("strace") is not None
        variants = [
            ("untraced", [], {}),
            ("idle thread", [], {"LD_PRELOAD": idle}),
            ("libtracer", [], {"LD_PRELOAD": lib, "TRACER_QUIET": "1", "TRACER_FORMAT": "tlv",
                               "TRACER_SYSCALLS": "all", "TRACER_OUTPUT": "trace"}),
            ("strace -f", ["strace", "-f", "-o", "/dev/null"], {}),
        ]
        times = {name: [] for name, _, _ in variants}
        for r in range(runs):
            for name, prefix, extra in variants:
                if prefix and (not have_strace or r >= strace_runs):
                    continue
                d = os.path.join(work, "run")
                shutil.rmtree(d, ignore_errors=True)
                os.makedirs(d)
                env = dict(os.environ, **extra)
                t = time.perf_counter()
                subprocess.run(prefix + [prog, "200000"], env=env, cwd=d, check=True,
                               stdout=subprocess.DEVNULL)
                times[name].append(time.perf_counter() - t)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    base = times["untraced"]
    mb = statistics.median(base)
    print(f"`python3 scripts/bench_syscalls.py --runs {runs} --strace-runs {strace_runs}`")
    print()
    print("| variant | runs | median wall | ratio of medians | ratio within rounds, median [range] |")
    print("| --- | --- | --- | --- | --- |")
    for name, t in times.items():
        if not t:
            continue
        m = statistics.median(t)
        within = [x / b for x, b in zip(t, base)]
        print(f"| {name} | {len(t)} | {m * 1000:.0f} ms | {m / mb:.3f}x | "
              f"{statistics.median(within):.3f} [{min(within):.3f}-{max(within):.3f}] |")


if __name__ == "__main__":
    main(sys.argv[1:])
