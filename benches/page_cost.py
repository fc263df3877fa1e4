#!/usr/bin/env python3
"""What one more B-tree page costs a commit on SQLite, by the engine's own
cases (Python's sqlite3 on a WAL file here, CPU time of this process,
the two schemas interleaved six times; needs no build).

    benches/page_cost.py [OFF|NORMAL|FULL [CASE ...]]   (synchronous, default
                          FULL: the store's default durability; every case
                          unless some are named)

- autoincrement: an attempts insert (the table's columns, the bench's row)
  with `id ... AUTOINCREMENT` (before migration 0027: every insert also
  rewrites `sqlite_sequence`) against a plain row id (0027);
- search: a searchable variable (0020: a WITHOUT ROWID table keyed by
  instance and name, plus an index by name and value) against one B-tree
  keyed by name, value, tenant and instance (migration 0028);
- attempts_key: an attempts insert (0027: a row-id table and its unique
  key, two B-trees) against one WITHOUT ROWID B-tree keyed by that unique
  key (not done: benches/README "Session 27"), with the bench's small row;
- attempts_key_2k: the same with 2 KiB of logs in the row (SQLite advises
  WITHOUT ROWID for small rows only).

Each one row per transaction (one at a time: each B-tree a frame of its own)
and 1,000 per transaction (at once). Figures are per insert, medians of six.
"""
import os
import sqlite3
import statistics
import sys
import tempfile
import time

ATTEMPT_COLUMNS = """instance_id TEXT NOT NULL, token INTEGER NOT NULL, node TEXT NOT NULL,
 attempt INTEGER NOT NULL, started_at INTEGER NOT NULL, ended_at INTEGER NOT NULL,
 outcome TEXT NOT NULL, code TEXT, message TEXT, stderr TEXT, logs TEXT, class TEXT,
 calls TEXT, input TEXT, output TEXT, item_node TEXT, item_index BIGINT,
 UNIQUE (instance_id, token, node, attempt)"""

ATTEMPT_INSERT = (
    "INSERT INTO attempts (instance_id, token, node, attempt, started_at, ended_at, outcome, "
    "input, output, logs) VALUES (?, 1, 'T', 1, 1765000000000, 1765000000001, 'completed', "
    "'{{\"do\":\"echo\"}}', '{{\"do\":\"echo\"}}', {logs}) "
    "ON CONFLICT (instance_id, token, node, attempt) DO NOTHING"
)
ATTEMPT_KEYED = ATTEMPT_COLUMNS.replace(
    "UNIQUE (instance_id, token, node, attempt)",
    "id INTEGER, PRIMARY KEY (instance_id, token, node, attempt)",
)

CASES = {
    "autoincrement": (
        ["CREATE TABLE other (id INTEGER PRIMARY KEY AUTOINCREMENT, x)",
         "INSERT INTO other (x) VALUES (1)",
         f"CREATE TABLE attempts (id INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT, {ATTEMPT_COLUMNS})"],
        ["CREATE TABLE other (id INTEGER PRIMARY KEY AUTOINCREMENT, x)",
         "INSERT INTO other (x) VALUES (1)",
         f"CREATE TABLE attempts (id INTEGER NOT NULL PRIMARY KEY, {ATTEMPT_COLUMNS})"],
        "INSERT INTO attempts (instance_id, token, node, attempt, started_at, ended_at, outcome, "
        "input, output) VALUES (?, 1, 'T', 1, 1765000000000, 1765000000001, 'completed', "
        "'{\"do\":\"echo\"}', '{\"do\":\"echo\"}') "
        "ON CONFLICT (instance_id, token, node, attempt) DO NOTHING",
    ),
    "search": (
        ["CREATE TABLE instance_vars (instance_id TEXT NOT NULL, tenant TEXT NOT NULL, "
         "name TEXT NOT NULL, value TEXT NOT NULL, PRIMARY KEY (instance_id, name)) WITHOUT ROWID",
         "CREATE INDEX instance_vars_lookup ON instance_vars (name, value, tenant, instance_id)"],
        ["CREATE TABLE instance_vars (instance_id TEXT NOT NULL, tenant TEXT NOT NULL, "
         "name TEXT NOT NULL, value TEXT NOT NULL, "
         "PRIMARY KEY (name, value, tenant, instance_id)) WITHOUT ROWID"],
        "INSERT INTO instance_vars (instance_id, tenant, name, value) "
        "VALUES (?, 'default', 'do', 'echo')",
    ),
    "attempts_key": (
        [f"CREATE TABLE attempts (id INTEGER NOT NULL PRIMARY KEY, {ATTEMPT_COLUMNS})"],
        [f"CREATE TABLE attempts ({ATTEMPT_KEYED}) WITHOUT ROWID"],
        ATTEMPT_INSERT.format(logs="NULL"),
    ),
    "attempts_key_2k": (
        [f"CREATE TABLE attempts (id INTEGER NOT NULL PRIMARY KEY, {ATTEMPT_COLUMNS})"],
        [f"CREATE TABLE attempts ({ATTEMPT_KEYED}) WITHOUT ROWID"],
        ATTEMPT_INSERT.format(logs="'" + "x" * 2048 + "'"),
    ),
}


def open_db(path, schema, sync):
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(path + suffix):
            os.remove(path + suffix)
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute(f"PRAGMA synchronous={sync}")
    for statement in schema:
        conn.execute(statement)
    return conn


def per_insert(conn, sql, n, per_tx, first):
    """µs of this process's CPU per insert of `n` rows, `per_tx` a transaction."""
    start = time.process_time()
    i = first
    while i < first + n:
        conn.execute("BEGIN")
        for _ in range(per_tx):
            conn.execute(sql, (f"0193a5b2-7c3d-7e4f-8a9b-{i:012d}",))
            i += 1
        conn.execute("COMMIT")
    return (time.process_time() - start) / n * 1e6


def main():
    sync = sys.argv[1] if len(sys.argv) > 1 else "FULL"
    if sync not in ("OFF", "NORMAL", "FULL"):
        sys.exit(__doc__)
    only = sys.argv[2:]
    work = tempfile.mkdtemp(prefix="page-cost-")
    for case, (before, after, sql) in CASES.items():
        if only and case not in only:
            continue
        for per_tx, n in ((1, 20_000), (1000, 200_000)):
            runs = {"before": [], "after": []}
            for r in range(6):
                order = ("before", "after") if r % 2 == 0 else ("after", "before")
                for name in order:
                    schema = before if name == "before" else after
                    conn = open_db(os.path.join(work, f"{name}.db"), schema, sync)
                    per_insert(conn, sql, n // 4, per_tx, 10**9)  # a table not empty
                    runs[name].append(per_insert(conn, sql, n, per_tx, 0))
                    conn.close()
            diffs = [b - a for b, a in zip(runs["before"], runs["after"])]
            print(f"{case}, {per_tx} per transaction, synchronous={sync}: "
                  f"before {statistics.median(runs['before']):.2f} µs, "
                  f"after {statistics.median(runs['after']):.2f} µs per insert; "
                  f"before - after {statistics.median(diffs):+.2f} "
                  f"({', '.join(f'{d:+.2f}' for d in diffs)})", flush=True)


if __name__ == "__main__":
    main()
