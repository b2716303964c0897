-- Record how many of a run's spans its derived rows reflect (run, span rows). MaxRowid is no longer
-- used (rowids inside a writer's transaction are transaction-local) and is written as -1.
INSERT OR REPLACE INTO derive_state VALUES (?, ?, -1)
