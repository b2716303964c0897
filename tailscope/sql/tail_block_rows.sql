-- Tail vs body's block sample, step 2 (tailscope.store.duckdb.tail_sample): the requests of the blocks
-- drawn. Each wanted range (part) is one block of a side: its requests are those of that side whose
-- root starts in [first_ns, last_ns] (the block's slices), numbered there in (Timestamp, TraceId)
-- order from 0, the block's being numbers skip .. skip + take - 1. Then up to N per side by
-- hash(TraceId), as the whole-selection sample orders them (the blocks hold 8 x ceil(N / 8) >= N).
-- Rows: trace, root span, dominant stage, side, the root's start (ns) and the longer of its server
-- and client-observed durations (ns), the part it came from and its run.
-- Params: the filter's, the parts' time ranges, tail_selection_at.sql's, then the parts (a list of
-- STRUCT(part, first_ns, last_ns, sel, skip, take)) and N.
{include:tail_selection_at},
parts AS (
    SELECT unnest(?::STRUCT(part INTEGER, first_ns BIGINT, last_ns BIGINT, sel BOOLEAN, skip BIGINT,
                                   take BIGINT)[], recursive := true)
),
numbered AS (
    SELECT p.part, m.RunLabel, m.TraceId, m.SpanId, m.DominantStage, m.selected, epoch_ns(m.Timestamp) AS start_ns,
           greatest(m.Duration, coalesce(m.ClientDuration, 0)) AS longest_ns, p.skip, p.take,
           row_number() OVER (PARTITION BY p.part ORDER BY m.Timestamp, m.TraceId) - 1 AS k
    FROM m JOIN parts AS p
        ON m.selected = p.sel AND epoch_ns(m.Timestamp) BETWEEN p.first_ns AND p.last_ns
)
SELECT TraceId, SpanId, DominantStage, selected, start_ns, longest_ns, part, RunLabel
FROM numbered
WHERE k >= skip AND k < skip + take
QUALIFY row_number() OVER (PARTITION BY selected ORDER BY hash(TraceId), TraceId) <= ?
