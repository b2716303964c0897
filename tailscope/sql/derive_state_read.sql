-- How many of a run's spans its derived rows reflect, and at least its longest request (ns, NULL:
-- not known). Param: run.
SELECT SpanRows, LongestNs FROM derive_state WHERE RunLabel = ?
