-- Issue 35 item 5. The fan-out item an attempt ran in (a Map item, a
-- Parallel branch, a multi-instance or loop iteration: the innermost one
-- around its token), kept on its row so the console names it after the item
-- and its fan-out ended (the snapshot keeps no token of an item that ended):
-- the fan-out node's IR id and the item's 0-based index. NULL outside any
-- fan-out and for the rows written before this migration.
ALTER TABLE attempts ADD COLUMN item_node TEXT;
ALTER TABLE attempts ADD COLUMN item_index BIGINT;
