#!/usr/bin/env python3
"""Summarises `strace -f -ff -T -o PREFIX` output by program: for each kind of process
that ran (nvc-hook prestart, poststop and cdi-setup, nvc-floor prestart and poststop),
the median over its processes of the system calls made and the time spent in them, then
per system call the median count and microseconds per process.

Usage: strace-summary.py PREFIX [TOP]   (PREFIX as given to strace -o)
"""
import collections
import glob
import re
import statistics
import sys

KINDS = {
    "nvc-hook prestart": re.compile(r'^execve\("[^"]*nvc-hook", \["[^"]*"(?:\.\.\.)?, "prestart"'),
    "nvc-hook poststop": re.compile(r'^execve\("[^"]*nvc-hook", \["[^"]*"(?:\.\.\.)?, "poststop"'),
    "nvc-hook cdi-setup": re.compile(r'^execve\("[^"]*nvc-hook", \["[^"]*"(?:\.\.\.)?, "cdi-setup"'),
    "nvc-floor prestart": re.compile(r'^execve\("[^"]*nvc-floor", \["nvc-floor", "prestart"'),
    "nvc-floor poststop": re.compile(r'^execve\("[^"]*nvc-floor", \["nvc-floor", "poststop"'),
}
CALL = re.compile(r"^(\w+)\(.*<([\d.]+)>$")


def process(path):
    """The kind of program this strace file shows after its execve, and its calls."""
    kind, calls = None, []
    with open(path, errors="replace") as f:
        for line in f:
            line = line.rstrip("\n")
            if kind is None:
                for name, pattern in KINDS.items():
                    if pattern.match(line):
                        kind = name
                        break
                continue
            m = CALL.match(line)
            if m:
                calls.append((m.group(1), float(m.group(2))))
    return kind, calls


def main():
    prefix = sys.argv[1]
    top = int(sys.argv[2]) if len(sys.argv) > 2 else 25
    by_kind = collections.defaultdict(list)
    for path in glob.glob(prefix + ".*"):
        kind, calls = process(path)
        if kind:
            by_kind[kind].append(calls)
    for kind in KINDS:
        runs = by_kind.get(kind)
        if not runs:
            continue
        totals = [sum(t for _, t in calls) * 1e3 for calls in runs]
        counts = [len(calls) for calls in runs]
        print(f"== {kind}: {len(runs)} processes; per process (median): "
              f"{statistics.median(counts):.0f} system calls, "
              f"{statistics.median(totals):.3f} ms in them")
        names = collections.Counter()
        for calls in runs:
            names.update({n for n, _ in calls})
        rows = []
        for name in names:
            n = [sum(1 for c, _ in calls if c == name) for calls in runs]
            us = [sum(t for c, t in calls if c == name) * 1e6 for calls in runs]
            rows.append((statistics.median(us), statistics.median(n), name))
        rows.sort(reverse=True)
        print(f"  {'system call':<18} {'count':>6} {'µs':>9} {'µs each':>8}")
        for us, n, name in rows[:top]:
            each = us / n if n else 0.0
            print(f"  {name:<18} {n:>6.0f} {us:>9.1f} {each:>8.1f}")


if __name__ == "__main__":
    main()
