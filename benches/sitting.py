#!/usr/bin/env python3
"""Interleaved sittings of the engine bench (issue 36's way of comparing builds).

    benches/sitting.py [--passes N] [--rounds R] [--work burst|a] NAME=BINARY[:DIR] ...

Runs each named bench binary (a `cargo bench --bench engine --no-run` executable,
built from its own worktree into its own target directory) once per pass,
alternating the order every pass, and prints one line per run with the load
average before -> after it and the bench's fsync probe (4 KiB overwrite +
fdatasync, p50 at its start / end), then each binary's medians and, for the
first binary against each other one, how many passes read lower or higher.
DIR is the directory the binary runs in (its worktree: the bench builds its
`chaos` guest there); the current one if left out. Compare figures of one
sitting only: machines here differ by 2-3x and drift within a session.

  --work burst  `-- burst`, SUTRA_BENCH_ROUNDS=R: µs CPU per instance at once
                (all threads; workers / writer / bench thread), the median
                round rate, database bytes per finished instance.
  --work a      `-- a`: one at a time with the default durability, p50 and
                µs CPU per instance (by thread, where the bench prints it).
  --work c      `-- c`: 1,000 PT1S timers, the lateness p50 / p99 (ms), the
                fires' µs CPU each (by thread), how long the starts took, the
                span from the first due to the last end and from the first due
                to the last due (ms; where the bench prints it).
  --work b      `-- b`: the retry overhead (ms) and its mean-based reading.
"""

import argparse
import os
import re
import statistics
import subprocess
import sys
import time


def load():
    with open("/proc/loadavg") as f:
        return f.read().split()[0]


def p50(log, label):
    m = re.search(re.escape(label) + r".*?p50\s+([0-9.]+) ms", log)
    return m.group(1) if m else "?"


def parse(log, work):
    """The figures of one run: {name: float}, or None if the bench failed."""
    if work == "burst":
        cost = re.search(r"([0-9.]+) µs CPU \(all threads\)", log)
        if not cost:
            return None
        out = {"µs": float(cost.group(1))}
        split = re.search(r"by thread \(µs per instance\)\s+(.*)", log)
        for name, v in re.findall(r"(\w+) ([0-9.]+)", split.group(1) if split else ""):
            out[name] = float(v)
        rate = re.search(r"median / best\s+([0-9.]+)", log)
        if rate:
            out["K/s"] = float(rate.group(1)) / 1000
        size = re.search(r"bytes per finished instance\s+([0-9.]+)", log)
        if size:
            out["bytes"] = float(size.group(1))
        return out
    if work == "c":
        late = re.search(r"timer lateness.*?p50\s+([0-9.]+) ms\s+p99\s+([0-9.]+) ms", log)
        cost = re.search(r"cost of the fires.*?([0-9.]+) µs CPU \(all threads: ([^)]*)\)", log)
        if not late or not cost:
            return None
        out = {"p50 ms": float(late.group(1)), "p99 ms": float(late.group(2)),
               "µs": float(cost.group(1))}
        for name, v in re.findall(r"(\w+) ([0-9.]+)", cost.group(2)):
            out[name] = float(v)
        took = re.search(r"all returned after ([0-9.]+) ms", log)
        span = re.search(r"firing rate.*? over ([0-9]+) ms", log)
        due = re.search(r"instants \(first due → last due\)\s+([0-9]+) ms", log)
        if due:
            out["dues ms"] = float(due.group(1))
        if took:
            out["starts ms"] = float(took.group(1))
        if span:
            out["span ms"] = float(span.group(1))
        return out
    if work == "b":
        over = re.search(r"overhead = .*?([+-][0-9.]+) ms\s+\(mean-based: ([+-][0-9.]+) ms", log)
        if not over:
            return None
        return {"overhead ms": float(over.group(1)), "mean-based ms": float(over.group(2))}
    line = re.search(r"default \(FULL\): one at a time, start→COMPLETED.*?p50\s+([0-9.]+) ms", log)
    cost = re.search(r"default \(FULL\): one at a time, cost\s+([0-9.]+) µs CPU(.*)", log)
    if not line or not cost:
        return None
    out = {"p50 ms": float(line.group(1)), "µs": float(cost.group(1))}
    for name, v in re.findall(r"(\w+) ([0-9.]+)", cost.group(2).split("),")[0]):
        out[name] = float(v)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--passes", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--work", choices=["burst", "a", "c", "b"], default="burst")
    ap.add_argument("binaries", nargs="+", metavar="NAME=BINARY[:DIR]")
    args = ap.parse_args()
    specs = []
    for s in args.binaries:
        name, _, rest = s.partition("=")
        binary, _, cwd = rest.partition(":")
        if not name or not binary or not os.access(binary, os.X_OK):
            sys.exit(f"sitting: {s!r} is not NAME=BINARY[:DIR] with an executable BINARY")
        specs.append((name, binary, cwd or os.getcwd()))
    env = dict(os.environ, SUTRA_BENCH_ROUNDS=str(args.rounds))
    runs = {name: [] for name, _, _ in specs}
    for p in range(1, args.passes + 1):
        order = specs if p % 2 else list(reversed(specs))
        for name, binary, cwd in order:
            before, at = load(), time.strftime("%H:%M:%S", time.gmtime())
            done = subprocess.run(
                [binary, "--bench", args.work], cwd=cwd, env=env,
                capture_output=True, text=True,
            )
            log = done.stdout + done.stderr
            figures = parse(log, args.work)
            if done.returncode != 0 or figures is None:
                sys.exit(f"sitting: {name} failed (exit {done.returncode}):\n{log[-2000:]}")
            probe = "fsync p50 {}/{}".format(
                p50(log, "fsync at start: 4 KiB overwrite"),
                p50(log, "fsync at end: 4 KiB overwrite"),
            )
            runs[name].append(figures)
            shown = ", ".join(f"{k} {v:g}" for k, v in figures.items())
            print(f"{p} {at} {name}: {shown}; load {before}->{load()}; {probe}", flush=True)
    print()
    for name, figures in runs.items():
        keys = figures[0].keys()
        medians = ", ".join(
            f"{k} {statistics.median(f[k] for f in figures if k in f):g}" for k in keys
        )
        print(f"{name} ({len(figures)} runs) medians: {medians}")
    first = specs[0][0]
    key = {"c": "p99 ms", "b": "overhead ms"}.get(args.work, "µs")
    for name, _, _ in specs[1:]:
        diffs = [b[key] - a[key] for a, b in zip(runs[first], runs[name])]
        lower = sum(d < 0 for d in diffs)
        print(
            f"{name} - {first} ({key}): median {statistics.median(diffs):+.1f}, "
            f"lower in {lower} of {len(diffs)} passes"
        )


if __name__ == "__main__":
    main()
