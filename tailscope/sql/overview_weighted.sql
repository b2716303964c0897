-- overview.sql for requests that stand for others (requests.Weight): the same rows, the request and
-- error counts sums of weights (rounded: the throughput the caller computes from them is the
-- population's), e2e percentiles weighted quantiles (the smallest Duration whose cumulative weight
-- reaches q of the run's total, less a relative 1e-12, as waterfall_weighted.sql).
WITH f AS (
    SELECT * FROM requests WHERE {where}
),
cumulative AS (
    SELECT RunLabel, Duration,
           sum(Weight) OVER (PARTITION BY RunLabel ORDER BY Duration ROWS UNBOUNDED PRECEDING) AS cw,
           sum(Weight) OVER (PARTITION BY RunLabel) * (1 - 1e-12) AS total
    FROM f
),
e2e AS (
    SELECT RunLabel,
           [min(Duration) FILTER (WHERE cw >= 0.5 * total), min(Duration) FILTER (WHERE cw >= 0.95 * total),
            min(Duration) FILTER (WHERE cw >= 0.99 * total),
            min(Duration) FILTER (WHERE cw >= 0.999 * total)]::DOUBLE[] AS e2e_ns
    FROM cumulative
    GROUP BY RunLabel
)
SELECT
    f.RunLabel,
    CAST(round(sum(Weight)) AS BIGINT) AS requests,
    CAST(round(coalesce(sum(Weight) FILTER (WHERE IsError), 0)) AS BIGINT) AS errors,
    min(Timestamp) AS first_request,
    max(Timestamp) AS last_request,
    min(epoch_ns(Timestamp)) AS first_start_ns,
    max(epoch_ns(Timestamp) + Duration) AS last_end_ns,
    any_value(e2e.e2e_ns) AS e2e_ns,
    list(DISTINCT ServiceName ORDER BY ServiceName) AS services
FROM f JOIN e2e ON e2e.RunLabel = f.RunLabel
GROUP BY f.RunLabel
ORDER BY f.RunLabel
