-- Tail vs body's sample on ClickHouse (a CTE for tail_sample.sql, after tail_selection.sql's): up
-- to N selected and N other requests, taken from a few stretches of time so that their spans sit in
-- few granules of otel_traces (tailscope.store.ch_sample): blocks of time sized to hold about N/4
-- requests of the smaller side, in the order of a hash of their number (the same order for both
-- sides), the requests in a block by cityHash64(TraceId). Another sample than DuckDB's
-- hash(TraceId) picks; the same when N covers every request. span_s: the seconds the filtered
-- requests span. Param: p8 (N).
sized AS (
    SELECT greatest(toInt64(1000000000),
                    toInt64((toUnixTimestamp64Nano(max(Timestamp)) - toUnixTimestamp64Nano(min(Timestamp)))
                            * {p8:UInt64} / (4 * greatest(1, least(countIf(selected), countIf(NOT selected))))))
               AS block_ns,
           intDiv(toUnixTimestamp64Nano(max(Timestamp)) - toUnixTimestamp64Nano(min(Timestamp)), 1000000000) + 1
               AS span_s
    FROM m
),
blocks AS (  -- the blocks each side's sample needs, in hash order (only their requests are sorted)
    SELECT b FROM (
        SELECT b,
               sum(n_sel) OVER w - n_sel AS sel_before,
               sum(n_rest) OVER w - n_rest AS rest_before
        FROM (
            SELECT intDiv(toUnixTimestamp64Nano(Timestamp), block_ns) AS b,
                   countIf(selected) AS n_sel, countIf(NOT selected) AS n_rest
            FROM m CROSS JOIN sized
            GROUP BY b
        )
        WINDOW w AS (ORDER BY cityHash64(b), b ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)
    )
    WHERE sel_before < {p8:UInt64} OR rest_before < {p8:UInt64}
),
sample AS (
    SELECT TraceId, SpanId AS RootSpanId, toString(DominantStage) AS DominantStage, selected, span_s
    FROM m CROSS JOIN sized
    WHERE intDiv(toUnixTimestamp64Nano(Timestamp), block_ns) IN (SELECT b FROM blocks)
    ORDER BY selected, cityHash64(intDiv(toUnixTimestamp64Nano(Timestamp), block_ns)), cityHash64(TraceId), TraceId
    LIMIT {p8:UInt64} BY selected
)
