-- Record how many of a run's spans its derived rows reflect and at least its longest request (run,
-- span rows, longest ns). MaxRowid is no longer used (rowids inside a writer's transaction are
-- transaction-local) and is written as -1.
INSERT OR REPLACE INTO derive_state (RunLabel, SpanRows, MaxRowid, LongestNs) VALUES (?, ?, -1, ?)
