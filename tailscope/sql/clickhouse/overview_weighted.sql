-- ../overview_weighted.sql on ClickHouse: request and error counts as sums of weights (rounded), e2e
-- percentiles [0.5, 0.95, 0.99, 0.999] as weighted quantiles (the smallest Duration whose cumulative
-- weight reaches q of the run's total, less a relative 1e-12): values, not order statistics pairs.
WITH f AS (
    SELECT * FROM tailscope_requests WHERE {where}
)
SELECT * EXCEPT (s, cs, total)
FROM (
    SELECT
        RunLabel,
        toInt64(round(sum(Weight))) AS requests,
        toInt64(round(sumIf(Weight, IsError))) AS errors,
        min(Timestamp) AS first_request,
        max(Timestamp) AS last_request,
        min(toUnixTimestamp64Nano(Timestamp)) AS first_start_ns,
        max(toUnixTimestamp64Nano(Timestamp) + Duration) AS last_end_ns,
        arraySort(groupArray((Duration, Weight))) AS s,
        arrayCumSum(arrayMap(p -> p.2, s)) AS cs,
        sum(Weight) * (1 - 1e-12) AS total,
        arrayMap(q -> toFloat64(s[arrayFirstIndex(c -> c >= q * total, cs)].1), [0.5, 0.95, 0.99, 0.999]) AS e2e_ns,
        arraySort(groupUniqArray(toString(ServiceName))) AS services
    FROM f
    GROUP BY RunLabel
)
ORDER BY RunLabel
