-- Issue 36 item 3: one page fewer in every commit that records an attempt.
--
-- On SQLite `attempts.id` was `AUTOINCREMENT` (0001), so every insert also
-- rewrote the table's row of `sqlite_sequence`: a page of its own, written
-- to the WAL by every commit of a step that ran a task. The id only orders
-- an instance's attempts (`ORDER BY id`; no API, row or reader names it),
-- and a plain row id orders them the same way: SQLite gives a new row the
-- largest id in the table plus one, so a new attempt's id exceeds every
-- attempt that exists. What AUTOINCREMENT added is that an id is never
-- given twice: without it, the id of the newest attempt can be given again
-- once that attempt's instance is deleted, which no reader can tell.
--
-- SQLite cannot drop AUTOINCREMENT in place, so the table is rebuilt with
-- the same columns in the same order and the same unique key (every row
-- copied once: on a large store this migration takes about as long as
-- writing the attempts again). PostgreSQL's identity column keeps its
-- sequence outside the table's pages and is left alone: on it the block
-- below is a comment.
{{sqlite_only_begin}}
CREATE TABLE attempts_0027 (
    id           INTEGER NOT NULL PRIMARY KEY,
    instance_id  TEXT    NOT NULL REFERENCES instances (id) ON DELETE CASCADE,
    token        INTEGER NOT NULL,
    node         TEXT    NOT NULL,
    attempt      INTEGER NOT NULL,
    started_at   INTEGER NOT NULL,
    ended_at     INTEGER NOT NULL,
    outcome      TEXT    NOT NULL,
    code         TEXT,
    message      TEXT,
    stderr       TEXT,
    logs         TEXT,
    class        TEXT,
    calls        TEXT,
    input        TEXT,
    output       TEXT,
    item_node    TEXT,
    item_index   BIGINT,
    UNIQUE (instance_id, token, node, attempt)
);
INSERT INTO attempts_0027 (id, instance_id, token, node, attempt, started_at, ended_at,
        outcome, code, message, stderr, logs, class, calls, input, output, item_node, item_index)
    SELECT id, instance_id, token, node, attempt, started_at, ended_at,
        outcome, code, message, stderr, logs, class, calls, input, output, item_node, item_index
    FROM attempts;
DROP TABLE attempts;
ALTER TABLE attempts_0027 RENAME TO attempts;
{{sqlite_only_end}}
