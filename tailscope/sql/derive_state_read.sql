-- How many of a run's spans its derived rows reflect, at least its longest request (ns, NULL: not
-- known), and whether its kept path rows cover every request (PathsKept). Param: run.
SELECT SpanRows, LongestNs, coalesce(PathsKept, false) FROM derive_state WHERE RunLabel = ?
