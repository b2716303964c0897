-- How many of a run's spans its derived rows reflect, at least its longest request (ns, NULL: not
-- known), whether its kept path rows cover every request (PathsKept) and whether any of its spans
-- is a phase candidate (NULL: not known). Param: run.
SELECT SpanRows, LongestNs, coalesce(PathsKept, false), PhaseCandidates FROM derive_state WHERE RunLabel = ?
