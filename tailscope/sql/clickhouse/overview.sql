-- Per-run summary of the filtered requests, as ../overview.sql, except the e2e percentiles: for
-- [0.5, 0.95, 0.99, 0.999] the two order statistics quantile_cont reads, [x[floor h], x[ceil h]] with
-- h = (n - 1)·q (1-based here: + 1), interpolated by tailscope.analysis.quantiles.
WITH f AS (
    SELECT * FROM tailscope_requests WHERE {where}
)
SELECT * EXCEPT (s)
FROM (
    SELECT
        RunLabel,
        count() AS requests,
        countIf(IsError) AS errors,
        min(Timestamp) AS first_request,
        max(Timestamp) AS last_request,
        min(toUnixTimestamp64Nano(Timestamp)) AS first_start_ns,
        max(toUnixTimestamp64Nano(Timestamp) + Duration) AS last_end_ns,
        arraySort(groupArray(Duration)) AS s,
        arrayMap(q -> [s[toUInt64(floor((length(s) - 1) * q)) + 1], s[toUInt64(ceil((length(s) - 1) * q)) + 1]],
                 [0.5, 0.95, 0.99, 0.999]) AS e2e_ns,
        arraySort(groupUniqArray(toString(ServiceName))) AS services
    FROM f
    GROUP BY RunLabel
)
ORDER BY RunLabel
