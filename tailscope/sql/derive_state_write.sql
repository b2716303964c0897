-- Record how many of a run's spans its derived rows reflect, at least its longest request and
-- whether its kept path rows cover every request (run, span rows, longest ns, paths kept). MaxRowid
-- is no longer used (rowids inside a writer's transaction are transaction-local) and is written as -1.
INSERT OR REPLACE INTO derive_state (RunLabel, SpanRows, MaxRowid, LongestNs, PathsKept) VALUES (?, ?, -1, ?, ?)
