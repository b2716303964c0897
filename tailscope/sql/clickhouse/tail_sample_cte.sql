-- Tail vs body's sample on ClickHouse (a CTE for tail_sample.sql and tail_attributes.sql, after
-- tail_selection.sql's): up to N selected and N other requests, taken from a few stretches of time
-- so that their spans sit in few granules of otel_traces (tailscope.store.ch_sample): blocks of
-- time sized to hold about N/4 requests of the smaller side, in the order of a hash of their number
-- (the same order for both sides), the requests in a block by cityHash64(TraceId). Another sample
-- than DuckDB's hash(TraceId) picks; the same when N covers every request. Param: p8 (N).
sized AS (
    SELECT greatest(toInt64(1000000000),
                    toInt64((toUnixTimestamp64Nano(max(Timestamp)) - toUnixTimestamp64Nano(min(Timestamp)))
                            * {p8:UInt64} / (4 * greatest(1, least(countIf(selected), countIf(NOT selected))))))
               AS block_ns
    FROM m
),
sample AS (
    SELECT TraceId, SpanId AS RootSpanId, toString(DominantStage) AS DominantStage, selected
    FROM m CROSS JOIN sized
    ORDER BY selected, cityHash64(intDiv(toUnixTimestamp64Nano(Timestamp), block_ns)), cityHash64(TraceId), TraceId
    LIMIT {p8:UInt64} BY selected
)
