-- Tail vs body's sample on ClickHouse (a CTE for tail_sample.sql, after tail_selection.sql's): up
-- to N selected and N other requests, taken from a few stretches of time so that their spans sit in
-- few granules of otel_traces (tailscope.store.clickhouse.sample): each side's requests in time order are
-- cut into blocks of ceil(N/8) consecutive ones and 8 blocks of each side are drawn (by a seeded hash
-- of their number and the side's size), the requests in them by cityHash64(TraceId). Every request of
-- a side is equally likely to be drawn (equal-size blocks drawn alike), wherever its time: a burst
-- that holds most of the tail holds most of the sample (tests/test_clickhouse_sample_bias.py).
-- DuckDB samples a selection of 100 k requests or more in the same blocks (tail_sample.py: the same
-- sample when N is a multiple of 8), a smaller one by hash(TraceId); the same when N covers it all.
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
    -- drawn as tailscope.store.block_sample.drawn_blocks draws them (DuckDB's): the 8 lowest of
    -- splitmix64(b xor splitmix64(SEED xor side << 62 xor total)), UInt64 products wrapping
    SELECT selected, b, span_s FROM (
        SELECT selected, b, span_s,
               bitXor(toUInt64(1592621585), bitXor(bitShiftLeft(toUInt64(selected), 62), toUInt64(total)))
                   + 11400714819323198485 AS s1,
               bitXor(s1, bitShiftRight(s1, 30)) * 13787848793156543929 AS s2,
               bitXor(s2, bitShiftRight(s2, 27)) * 10723151780598845931 AS s3,
               bitXor(toUInt64(b), bitXor(s3, bitShiftRight(s3, 31))) + 11400714819323198485 AS k1,
               bitXor(k1, bitShiftRight(k1, 30)) * 13787848793156543929 AS k2,
               bitXor(k2, bitShiftRight(k2, 27)) * 10723151780598845931 AS k3,
               bitXor(k3, bitShiftRight(k3, 31)) AS draw
        FROM (
            SELECT selected, total, span_s, arrayJoin(range(intDiv(total + per_block - 1, per_block))) AS b
            FROM (SELECT *, intDiv({p8:UInt64} + 7, 8) AS per_block FROM sides)
        )
    )
    ORDER BY selected, draw, b
    LIMIT 8 BY selected
),
sample AS (
    SELECT r.TraceId AS TraceId, r.SpanId AS RootSpanId, toString(r.DominantStage) AS DominantStage,
           r.selected AS selected, k.span_s AS span_s, toUnixTimestamp64Nano(r.Timestamp) AS RootNs
    FROM ranked AS r INNER JOIN blocks AS k ON r.selected = k.selected AND r.b = k.b
    ORDER BY selected, cityHash64(TraceId), TraceId
    LIMIT {p8:UInt64} BY selected
)
