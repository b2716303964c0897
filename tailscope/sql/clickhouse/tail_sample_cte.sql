-- Tail vs body's sample on ClickHouse (a CTE for tail_sample.sql, after tail_selection.sql's): up
-- to N selected and N other requests, taken from a few stretches of time so that their spans sit in
-- few granules of otel_traces (tailscope.store.ch_sample): each side's requests in time order are
-- cut into blocks of ceil(N/8) consecutive ones and 8 blocks of each side are drawn (by a hash of
-- their number and the side's size), the requests in them by cityHash64(TraceId). Every request of
-- a side is equally likely to be drawn (equal-size blocks drawn alike), wherever its time: a burst
-- that holds most of the tail holds most of the sample (tests/test_clickhouse_sample_bias.py).
-- Another sample than DuckDB's hash(TraceId) picks; the same when N covers every request.
-- span_s: the seconds the filtered requests span. Param: p8 (N).
sized AS (
    SELECT intDiv(toUnixTimestamp64Nano(max(Timestamp)) - toUnixTimestamp64Nano(min(Timestamp)), 1000000000) + 1
               AS span_s
    FROM m
),
ranked AS (
    SELECT TraceId, SpanId, DominantStage, selected,
           intDiv(row_number() OVER (PARTITION BY selected ORDER BY Timestamp, TraceId) - 1,
                  intDiv({p8:UInt64} + 7, 8)) AS b
    FROM m
),
blocks AS (  -- from the sides' sizes, not from ranked (a second reference computes its window again)
    SELECT selected, b FROM (
        SELECT selected, total, arrayJoin(range(intDiv(total + per_block - 1, per_block))) AS b
        FROM (SELECT selected, count() AS total, intDiv({p8:UInt64} + 7, 8) AS per_block FROM m GROUP BY selected)
    )
    ORDER BY selected, cityHash64(b, selected, total), b
    LIMIT 8 BY selected
),
sample AS (
    SELECT TraceId, SpanId AS RootSpanId, toString(DominantStage) AS DominantStage, selected, span_s
    FROM ranked CROSS JOIN sized
    WHERE (selected, b) IN (SELECT selected, b FROM blocks)
    ORDER BY selected, cityHash64(TraceId), TraceId
    LIMIT {p8:UInt64} BY selected
)
