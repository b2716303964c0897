-- Per-run summary of the filtered requests: counts, errors, the time they span, e2e percentiles.
-- Throughput = requests / (last request end - first request start), computed by the caller.
WITH f AS (
    SELECT * FROM requests WHERE {where}
)
SELECT
    RunLabel,
    count(*) AS requests,
    count(*) FILTER (WHERE IsError) AS errors,
    min(Timestamp) AS first_request,
    max(Timestamp) AS last_request,
    min(epoch_ns(Timestamp)) AS first_start_ns,
    max(epoch_ns(Timestamp) + Duration) AS last_end_ns,
    quantile_cont(Duration, [0.5, 0.95, 0.99, 0.999]) AS e2e_ns,
    list(DISTINCT ServiceName ORDER BY ServiceName) AS services
FROM f
GROUP BY RunLabel
ORDER BY RunLabel
