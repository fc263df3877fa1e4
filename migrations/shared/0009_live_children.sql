-- Issue 18: the orphan pass (at boot and with every sweep) looks for live
-- child flows. Through `instances_parent` alone SQLite's planner preferred
-- the state index and walked every live instance (a million parked ones:
-- a second at boot); this index leads with the state, as that index does,
-- but holds child flows only, and covers the pass's columns.
CREATE INDEX instances_live_children ON instances (state, parent_id, parent_park, id) WHERE parent_id IS NOT NULL;
