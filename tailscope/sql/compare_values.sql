-- Per-request e2e and stage times (ns) of one run, for the bootstrap in analysis.compare.
-- Param after the filter's: none (the filter carries the run).
WITH f AS (
    SELECT * FROM requests WHERE {where}
)
SELECT Duration, COLUMNS('_ns$') FROM f
