-- Tail vs body's sample on ClickHouse (a CTE for tail_sample.sql, after tail_selection.sql's): up
-- to N selected and N other requests, taken from a few stretches of time so that their spans sit in
-- few granules of otel_traces (tailscope.store.clickhouse.sample): each side's requests in time order are
-- cut into blocks of ceil(N/8) consecutive ones and 8 blocks of each side are drawn (by a hash of
-- their number and the side's size), the requests in them by cityHash64(TraceId). Every request of
-- a side is equally likely to be drawn (equal-size blocks drawn alike), wherever its time: a burst
-- that holds most of the tail holds most of the sample (tests/test_clickhouse_sample_bias.py).
-- Another sample than DuckDB's hash(TraceId) picks; the same when N covers every request.
-- span_s: the seconds the filtered requests span; RootNs: the root's start (ns). Param: p8 (N).
ranked AS (
    SELECT TraceId, SpanId, DominantStage, selected, Timestamp,
           intDiv(row_number() OVER (PARTITION BY selected ORDER BY Timestamp, TraceId) - 1,
                  intDiv({p8:UInt64} + 7, 8)) AS b
    FROM m
),
sides AS (  -- each side's size, and the seconds the filtered requests span (both sides)
    SELECT selected, total,
           intDiv(toUnixTimestamp64Nano(max(last) OVER ()) - toUnixTimestamp64Nano(min(first) OVER ()),
                  1000000000) + 1 AS span_s
    FROM (SELECT selected, count() AS total, min(Timestamp) AS first, max(Timestamp) AS last
          FROM m GROUP BY selected)
),
blocks AS (  -- from the sides' sizes, not from ranked (a second reference computes its window again)
    SELECT selected, b, span_s FROM (
        SELECT selected, total, span_s, arrayJoin(range(intDiv(total + per_block - 1, per_block))) AS b
        FROM (SELECT *, intDiv({p8:UInt64} + 7, 8) AS per_block FROM sides)
    )
    ORDER BY selected, cityHash64(b, selected, total), b
    LIMIT 8 BY selected
),
sample AS (
    SELECT r.TraceId AS TraceId, r.SpanId AS RootSpanId, toString(r.DominantStage) AS DominantStage,
           r.selected AS selected, k.span_s AS span_s, toUnixTimestamp64Nano(r.Timestamp) AS RootNs
    FROM ranked AS r INNER JOIN blocks AS k ON r.selected = k.selected AND r.b = k.b
    ORDER BY selected, cityHash64(TraceId), TraceId
    LIMIT {p8:UInt64} BY selected
)
