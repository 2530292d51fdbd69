#!/usr/bin/env python3
"""Compares libtracer builds on one command, interleaved, in one go.

Usage:
    python3 scripts/ab.py [--runs N] NAME=LIB [NAME=LIB ...] -- CMD ARGS...

Each round runs CMD untraced, then under every LIB (LD_PRELOAD, quiet,
trace files in a scratch directory emptied before each run), from the
caller's directory; prints the median wall time of each and its ratio to
the untraced median, then the median CPU time (user + system, every
thread of the command and its children) and its ratio. On a shared host
the CPU time moves less than the wall time when other jobs take the
cores, so a difference that only the wall time shows is noise. Extra
environment (PYTHONMALLOC=malloc, ...) is taken from the caller's.
Example, a build kept aside against the current one:

    cp target/release/libtracer.so /tmp/before.so   # ... change, rebuild
    python3 scripts/ab.py --runs 7 before=/tmp/before.so \\
        after=target/release/libtracer.so -- ./chain_fp 1000000

A LIB may carry settings of its own after commas, so one build can be
compared with itself under other settings:

    python3 scripts/ab.py fp=lib.so,TRACER_UNWIND=fp dwarf=lib.so -- ...

With --exit, the traced runs also print their exit's length (the private
TRACER_STACK_STATS line "exit: N us in all", the longest of the run's
processes): its median and range per build.
"""
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time


def main(argv):
    runs = 7
    exits = False
    while argv[:1] in (["--runs"], ["--exit"]):
        if argv[0] == "--exit":
            exits = True
            argv = argv[1:]
        else:
            runs = int(argv[1])
            argv = argv[2:]
    if "--" not in argv:
        sys.exit(__doc__)
    split = argv.index("--")
    libs = [a.split("=", 1) for a in argv[:split]]
    settings = {}
    for l in libs:
        if len(l) == 2:
            lib, *extra = l[1].split(",")
            l[1] = lib
            settings[l[0]] = dict(e.split("=", 1) for e in extra)
    cmd = argv[split + 1:]
    if not cmd or any(len(l) != 2 for l in libs):
        sys.exit(__doc__)
    scratch = tempfile.mkdtemp(prefix="ab-")
    times = {"untraced": []}
    times.update({name: [] for name, _ in libs})
    cpu = {name: [] for name in times}
    exit_ms = {name: [] for name, _ in libs}
    try:
        for _ in range(runs):
            for name in times:
                env = dict(os.environ)
                d = os.path.join(scratch, name)
                shutil.rmtree(d, ignore_errors=True)
                os.makedirs(d)
                if name != "untraced":
                    lib = os.path.abspath(dict(libs)[name])
                    env.update(LD_PRELOAD=lib, TRACER_QUIET="1",
                               TRACER_OUTPUT=os.path.join(d, "t"))
                    env.update(settings[name])
                    if exits:
                        env.update(TRACER_STACK_STATS="1")
                before = resource.getrusage(resource.RUSAGE_CHILDREN)
                t = time.perf_counter()
                run = subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE if exits else None)
                times[name].append(time.perf_counter() - t)
                if exits and name != "untraced":
                    us = [int(m) for m in re.findall(rb"exit: (\d+) us in all", run.stderr)]
                    if us:
                        exit_ms[name].append(max(us) / 1000)
                after = resource.getrusage(resource.RUSAGE_CHILDREN)
                cpu[name].append(after.ru_utime + after.ru_stime
                                 - before.ru_utime - before.ru_stime)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    for what, table in (("wall", times), ("cpu", cpu)):
        base = statistics.median(table["untraced"])
        for name, t in table.items():
            m = statistics.median(t)
            print(f"{what} {name}: {m * 1000:.0f} ms ({m / base:.2f}x) "
                  f"[{min(t) * 1000:.0f}-{max(t) * 1000:.0f}]")
    for name, t in exit_ms.items():
        if t:
            print(f"exit {name}: {statistics.median(t):.1f} ms "
                  f"[{min(t):.1f}-{max(t):.1f}]")


if __name__ == "__main__":
    main(sys.argv[1:])
