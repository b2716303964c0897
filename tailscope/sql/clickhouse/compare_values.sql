-- Per-request e2e and stage times (ns) of one run, for the bootstrap in analysis.compare.
WITH f AS (
    SELECT * FROM tailscope_requests WHERE {where}
)
SELECT Duration, COLUMNS('_ns$') FROM f
