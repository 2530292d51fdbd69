#!/usr/bin/env python3
"""Where a process's peak RSS goes: runs a command, polls its VmRSS every
millisecond, and keeps /proc/PID/smaps from the sample with the highest RSS;
at exit prints VmHWM, the RSS over time (coarse) and the resident KiB of each
mapping at that peak, largest first (anonymous mappings by size, files by
name and permissions), so two builds can be compared mapping by mapping.

Usage: scripts/rss_peak.py [--smaps FILE] COMMAND [ARGS...]
(the environment is passed on: put LD_PRELOAD etc. in the command with `env`
so this script itself is not traced). --smaps FILE keeps the raw smaps.
"""
import os
import re
import subprocess
import sys
import time


def main():
    args = sys.argv[1:]
    keep = None
    if args[:1] == ["--smaps"]:
        keep, args = args[1], args[2:]
    if not args:
        sys.exit(__doc__)
    t0 = time.time()
    proc = subprocess.Popen(args)
    best, best_smaps, best_t, hwm, timeline = 0, "", 0.0, 0, []
    while proc.poll() is None:
        try:
            with open(f"/proc/{proc.pid}/status") as f:
                status = f.read()
            rss = int(re.search(r"VmRSS:\s+(\d+)", status).group(1))
            hwm = max(hwm, int(re.search(r"VmHWM:\s+(\d+)", status).group(1)))
        except (OSError, AttributeError):
            break
        t = time.time() - t0
        timeline.append((t, rss))
        if rss > best:
            try:
                with open(f"/proc/{proc.pid}/smaps") as f:
                    best_smaps, best, best_t = f.read(), rss, t
            except OSError:
                pass
        time.sleep(0.001)
    proc.wait()
    if keep:
        with open(keep, "w") as f:
            f.write(best_smaps)
    print(f"VmHWM {hwm} KiB; highest sample {best} KiB at {best_t:.3f} s", file=sys.stderr)
    for t, rss in timeline[:: max(1, len(timeline) // 20)]:
        print(f"  {t:7.3f} s {rss:8d} KiB", file=sys.stderr)
    groups = {}
    current = None
    for line in best_smaps.splitlines():
        if re.match(r"^[0-9a-f]+-[0-9a-f]+ ", line):
            parts = line.split(None, 5)
            lo, hi = (int(x, 16) for x in parts[0].split("-"))
            name = parts[5] if len(parts) > 5 else ""
            key = os.path.basename(name) if name else f"anonymous {(hi - lo) // 1024} KiB"
            current = groups.setdefault((key, parts[1]), [0, 0])
            current[1] += 1
        elif line.startswith("Rss:") and current is not None:
            current[0] += int(line.split()[1])
    for (key, perm), (rss, n) in sorted(groups.items(), key=lambda kv: -kv[1][0]):
        if rss >= 64:
            print(f"{rss:8d} KiB  {perm}  {key}" + (f" (x{n})" if n > 1 else ""), file=sys.stderr)


if __name__ == "__main__":
    main()
