-- Weighted quantiles of the filtered requests' e2e Duration for the quantiles p1 (Array(Float64)), as
-- ../waterfall_weighted.sql computes them: the smallest Duration whose cumulative weight (in Duration
-- order) reaches q of the total, less a relative 1e-12; then the total weight, rounded (the requests
-- the sample stands for). What order_statistics.sql is for unweighted requests (views.quantile_values).
WITH f AS (
    SELECT Duration, Weight FROM tailscope_requests WHERE {where}
)
SELECT arrayMap(q -> toFloat64(s[arrayFirstIndex(c -> c >= q * total, cs)]), {p1:Array(Float64)}) AS qs,
       toInt64(round(weights)) AS n
FROM (
    SELECT arraySort(groupArray((Duration, Weight))) AS pairs,
           arrayMap(p -> p.1, pairs) AS s,
           arrayCumSum(arrayMap(p -> p.2, pairs)) AS cs,
           sum(Weight) AS weights,
           weights * (1 - 1e-12) AS total
    FROM f
)
