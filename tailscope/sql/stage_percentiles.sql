-- Exact per-stage percentiles (quantile_cont) of the filtered requests' exclusive times, one list
-- [p50, p95, p99, p99.9] in ns per stage column, in table order (ALL_STAGES). They do not add up.
WITH f AS (
    SELECT * FROM requests WHERE {where}
)
SELECT quantile_cont(COLUMNS('_ns$'), [0.5, 0.95, 0.99, 0.999]) FROM f
