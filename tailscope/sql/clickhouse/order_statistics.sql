-- The order statistics quantile_cont reads for the quantiles p1 (Array(Float64)) of the filtered
-- requests' e2e Duration: per quantile, [x[floor h], x[ceil h]] with h = (n - 1)·q, then n; the
-- waterfall's band bounds on ClickHouse (tailscope.analysis.quantiles interpolates).
WITH f AS (
    SELECT Duration FROM tailscope_requests WHERE {where}
)
SELECT arrayMap(q -> [s[toUInt64(floor((length(s) - 1) * q)) + 1], s[toUInt64(ceil((length(s) - 1) * q)) + 1]],
                {p1:Array(Float64)}) AS pairs,
       length(s) AS n
FROM (SELECT arraySort(groupArray(Duration)) AS s FROM f)
