-- Per-run summary of the filtered requests: counts, errors, the time they span, e2e percentiles.
-- Throughput = requests / (last request end - first request start), computed by the caller.
WITH f AS (
    SELECT * FROM requests WHERE RunLabel = ? AND ServiceName = ? AND Route = ? AND Instance = ? AND Timestamp >= ? AND Timestamp < ?
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
-- params: ["r1", "api", "/v1/predict", "i-1", "2026-01-02 03:04:05", "2026-01-02 03:04:05"]
