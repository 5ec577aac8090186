#!/usr/bin/env python3
"""nvc-hook's phases beside the floor program's, from one `nvc-bench --debug-log` run.

Usage: phases-vs-floor.py WORK_DIR

WORK_DIR is the bench's --work directory: nvc-hook logs its phases at debug level in
nvc.log (`prestart phases ms: ...`, `set up phases ms: ...`, `poststop phases ms: ...`, a
line each with its pid), the floor program in floor-phases.log (`floor prestart phases
ms: ...`). Only the hooks of GPU containers with all GPUs and `utility,compute` are
kept: nvc's are told apart from the `all` capabilities ones by the number of mounts
(`set up ...: N mounts`) and of things taken away (`N things nvc made taken away`), the
fewer being `utility,compute`; the floor runs only that request. Prints the median of
each phase, in ms, and the phases lined up: what the floor does, and what only nvc does.
"""
import collections
import re
import statistics
import sys

PHASES = re.compile(r"\[(\d+)\] DEBUG: (prestart|set up|poststop) phases ms: (.*)")
FLOOR = re.compile(r"floor (prestart|poststop) phases ms: (.*)")
MOUNTS = re.compile(r"\[(\d+)\] INFO: set up .*: (\d+) mounts")
TAKEN = re.compile(r"\[(\d+)\] INFO: container .* ended: (\d+) things nvc made taken away")


def fields(text):
    f = text.split()
    return {f[i]: float(f[i + 1]) for i in range(0, len(f) - 1, 2)}


def medians(rows):
    keys = []
    for r in rows:
        keys += [k for k in r if k not in keys]
    return {k: statistics.median([r.get(k, 0.0) for r in rows]) for k in keys}


def main(work):
    by_pid = collections.defaultdict(dict)
    size = {}
    for line in open(f"{work}/nvc.log", errors="replace"):
        m = PHASES.search(line)
        if m:
            by_pid[m.group(1)][m.group(2)] = fields(m.group(3))
        m = MOUNTS.search(line) or TAKEN.search(line)
        if m:
            size[m.group(1)] = int(m.group(2))
    # The smaller request: the fewest mounts (prestart) or things taken away (poststop).
    kept = {}
    for what in ("prestart", "poststop"):
        pids = [p for p, d in by_pid.items() if what in d and p in size]
        if not pids:
            continue
        least = min(size[p] for p in pids)
        kept[what] = [p for p in pids if size[p] == least]
    floor = collections.defaultdict(list)
    for line in open(f"{work}/floor-phases.log", errors="replace"):
        m = FLOOR.search(line)
        if m:
            floor[m.group(1)].append(fields(m.group(2)))

    pre = medians([by_pid[p]["prestart"] for p in kept.get("prestart", [])])
    setup = medians([by_pid[p]["set up"] for p in kept.get("prestart", []) if "set up" in by_pid[p]])
    post = medians([by_pid[p]["poststop"] for p in kept.get("poststop", [])])
    fpre = medians(floor["prestart"])
    fpost = medians(floor["poststop"])

    def show(name, d, n):
        print(f"{name} ({n} runs): " + " ".join(f"{k} {v:.3f}" for k, v in d.items()))

    show("nvc-hook prestart", pre, len(kept.get("prestart", [])))
    show("  of which set up", setup, len(kept.get("prestart", [])))
    show("nvc-floor prestart", fpre, len(floor["prestart"]))
    show("nvc-hook poststop", post, len(kept.get("poststop", [])))
    show("nvc-floor poststop", fpost, len(floor["poststop"]))

    # The phases lined up, prestart: the floor's on the left, what nvc does for each.
    g = lambda d, *ks: sum(d.get(k, 0.0) for k in ks)
    rows = [
        ("reading what to do (floor: state, spec, plan; nvc: config and log, state, plan)",
         g(fpre, "read"), g(pre, "config", "state", "plan")),
        ("GPU leases (nvc only)", 0.0, g(pre, "leases")),
        ("opening the record (nvc only; the floor's is in reading)", 0.0, g(pre, "record-open")),
        ("cloning the driver's files (floor: all its mounts; nvc: the files, then nodes, "
         "the /proc/driver/nvidia mask's)", g(fpre, "sources"),
         g(setup, "sources", "nodes", "proc-mask-sources")),
        ("entering the container", g(fpre, "enter"), g(setup, "enter", "runtime-tmpfs")),
        ("mount points and mounts", g(fpre, "mounts"), g(setup, "mounts", "device-nodes")),
        ("links", g(fpre, "links"), g(setup, "links")),
        ("/proc/driver/nvidia mask (nvc only)", 0.0, g(setup, "proc-mask")),
        ("ld.so.cache (and the floor's record)", g(fpre, "record", "ldcache"), g(setup, "ldcache")),
        ("saving the record (nvc only)", 0.0, g(pre, "record-save")),
    ]
    print()
    print("| prestart phase | floor ms | nvc ms | nvc above floor ms |")
    print("| --- | ---: | ---: | ---: |")
    for name, f, n in rows:
        print(f"| {name} | {f:.3f} | {n:.3f} | {n - f:+.3f} |")
    print(f"| total, in the process | {fpre.get('total', 0):.3f} | {pre.get('total', 0):.3f} "
          f"| {pre.get('total', 0) - fpre.get('total', 0):+.3f} |")
    if post and fpost:
        print()
        print("| poststop phase | floor ms | nvc ms | nvc above floor ms |")
        print("| --- | ---: | ---: | ---: |")
        prows = [
            ("reading what to undo (floor: state, spec, record; nvc: config and log, state, "
             "the spec's root)", g(fpost, "read"), g(post, "config", "state", "spec")),
            ("taking away what was made, the cache put back, the record removed (nvc: under "
             "the rootfs's lock, each thing checked first)",
             g(fpost, "undo", "ldcache", "record"), g(post, "undo")),
            ("ending the GPU leases (nvc only)", 0.0, g(post, "leases")),
        ]
        for name, f, n in prows:
            print(f"| {name} | {f:.3f} | {n:.3f} | {n - f:+.3f} |")
        print(f"| total, in the process | {fpost.get('total', 0):.3f} | {post.get('total', 0):.3f} "
              f"| {post.get('total', 0) - fpost.get('total', 0):+.3f} |")


if __name__ == "__main__":
    main(sys.argv[1])
