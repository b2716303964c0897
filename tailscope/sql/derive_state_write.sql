-- Record how many of a run's spans its derived rows reflect, at least its longest request, whether
-- its kept path rows cover every request and whether any of its spans is one the phase rules could
-- read (run, span rows, longest ns, paths kept, phase candidates: NULL when not known). MaxRowid is
-- no longer used (rowids inside a writer's transaction are transaction-local) and is written as -1.
INSERT OR REPLACE INTO derive_state (RunLabel, SpanRows, MaxRowid, LongestNs, PathsKept, PhaseCandidates)
VALUES (?, ?, -1, ?, ?, ?)
