#!/usr/bin/env python3
"""Summarises `strace -ff -ttt -T -e trace=flock,execve -o PREFIX`: per program (nvc-hook
and nvc-floor, prestart and poststop), how long its processes lived (execve to exit) and
how long their first, second, ... flock waited, as medians, 90th percentiles, maxima and
sums in milliseconds.

Usage: strace-locks.py PREFIX
"""
import collections
import glob
import re
import statistics
import sys

EXEC = re.compile(r'^([\d.]+) execve\("[^"]*/(nvc-hook|nvc-floor)", \["[^"]*", "(\w+)"')
FLOCK = re.compile(r'^[\d.]+ flock\(\d+, LOCK_\w+\)\s+= 0 <([\d.]+)>')
EXIT = re.compile(r"^([\d.]+) \+\+\+ exited")


def row(name, values):
    v = sorted(values)
    p90 = v[min(len(v) - 1, int(len(v) * 0.9))]
    print(f"  {name:<16} n={len(v):<5} median {statistics.median(v):8.3f}  p90 {p90:8.3f}"
          f"  max {v[-1]:8.3f}  sum {sum(v):9.1f}")


def main():
    lives = collections.defaultdict(list)
    waits = collections.defaultdict(list)
    for path in glob.glob(sys.argv[1] + ".*"):
        kind, start, end, locks = None, None, None, []
        with open(path, errors="replace") as f:
            for line in f:
                m = EXEC.match(line)
                if m:
                    kind, start, locks = f"{m.group(2)} {m.group(3)}", float(m.group(1)), []
                    continue
                if kind is None:
                    continue
                m = FLOCK.match(line)
                if m:
                    locks.append(float(m.group(1)) * 1e3)
                    continue
                m = EXIT.match(line)
                if m:
                    end = float(m.group(1))
        if kind is None or end is None:
            continue
        lives[kind].append((end - start) * 1e3)
        for i, w in enumerate(locks):
            waits[(kind, i)].append(w)
    for kind in sorted(lives):
        print(f"== {kind} (ms)")
        row("lifetime", lives[kind])
        for (k, i), w in sorted(waits.items()):
            if k == kind:
                row(f"flock #{i + 1}", w)


if __name__ == "__main__":
    main()
