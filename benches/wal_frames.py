#!/usr/bin/env python3
"""Which B-trees each SQLite commit of the engine bench's `-- a` writes.

    benches/wal_frames.py BINARY [DIR]      (SUTRA_BENCH_SCALE, default 3)

Runs the bench binary (a `cargo bench --bench engine --no-run` executable; DIR
is the worktree it runs in, the current directory if left out) under
`strace`, reads the page number in the header of every WAL frame it writes
(SQLite writes a frame as two pwrites: the 24-byte header, then the page)
and groups the frames by the fsync of the WAL that ends each commit; while
it runs it copies the database every two seconds and maps page numbers to
B-tree names with SQLite's `dbstat`. Prints the median frames per commit
(one at a time: most commits) and, per B-tree, its distinct pages per
commit (the mean over all commits; an at-once commit writes several). Unlike CPU time, the same for the same code on any machine:
each page a commit writes is a 4 KiB frame, two syscalls and part of the
fsync (session 26: 16-19 µs of CPU per frame one at a time on its machine).
"""
import collections
import glob
import os
import re
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time


def decode(hexes):
    return bytes(int(h, 16) for h in re.findall(r"\\x([0-9a-f]{2})", hexes))


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    binary, cwd = sys.argv[1], (sys.argv[2] if len(sys.argv) == 3 else os.getcwd())
    work = tempfile.mkdtemp(prefix="wal-frames-")
    trace = os.path.join(work, "trace")
    env = dict(os.environ, SUTRA_BENCH_SCALE=os.environ.get("SUTRA_BENCH_SCALE", "3"))
    run = subprocess.Popen(
        ["strace", "-f", "-y", "-xx", "-s", "4", "-e", "trace=pwrite64,fsync,fdatasync",
         "-o", trace, binary, "--bench", "a"],
        cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    pages = {}
    while run.poll() is None:
        time.sleep(2)
        for db in glob.glob(os.path.join(cwd, "target", "bench-engine-*", "*")):
            if db.endswith(("-wal", "-shm", "-journal")) or not os.path.isfile(db):
                continue
            try:
                for suffix in ("", "-wal"):
                    if os.path.exists(db + suffix):
                        shutil.copy(db + suffix, os.path.join(work, "db" + suffix))
                conn = sqlite3.connect(os.path.join(work, "db"))
                names = dict(conn.execute("SELECT pageno, name FROM dbstat"))
                conn.close()
                if len(names) > len(pages):
                    pages = names
            except (OSError, sqlite3.Error):
                pass  # a copy caught mid-write: the next one will do
    if run.returncode != 0:
        sys.exit(f"wal_frames: the bench failed (exit {run.returncode})")
    commits, frames = [], []
    for line in open(trace):
        line = re.sub(r"<((?:\\x[0-9a-f]{2})+)>",
                      lambda m: "<" + decode(m.group(1)).decode("utf-8", "replace") + ">", line)
        m = re.search(r'pwrite64\(\d+<[^>]*-wal>, "((?:\\x[0-9a-f]{2})*)"[^,]*, 24,', line)
        if m:
            frames.append(int.from_bytes(decode(m.group(1))[:4], "big"))
        elif re.search(r"f(data)?sync\(\d+<[^>]*-wal>", line) and frames:
            commits.append(frames)
            frames = []
    shutil.rmtree(work, ignore_errors=True)
    if not commits:
        sys.exit("wal_frames: no WAL commit seen")
    print(f"{len(commits)} commits; frames per commit: median "
          f"{statistics.median(len(c) for c in commits):g}")
    seen = collections.Counter()
    for c in commits:
        for page in set(c):
            seen["page 1 (the header)" if page == 1 else pages.get(page, f"page {page}")] += 1
    for name, k in seen.most_common():
        if k / len(commits) >= 0.05:
            print(f"  {name:40} {k / len(commits):5.2f} pages per commit")


if __name__ == "__main__":
    main()
