-- Tail vs body's sample of a large run, from a few stretches of time (as ClickHouse's
-- clickhouse/tail_sample_cte.sql): each side's time is cut into slots of about N/16 of its
-- requests, 16 slots per side are drawn with a probability proportional to their requests (keys
-- ln(u)/n, u from a hash of the slot: Efraimidis–Spirakis), and the side's sample is the N requests
-- of its drawn slots with the smallest hash(TraceId). Every request of a side is about equally
-- likely to be drawn, wherever its time; their spans then lie in 32 stretches of the run
-- (tail_attributes_windows.sql reads only those). Rows: run, trace, root span, dominant stage, side,
-- root start (ns), slot. Params: the filter's, tail_selection.sql's, then N (twice).
{include:tail_selection},
sides AS (
    SELECT selected, count(*) AS total, min(epoch_ns(Timestamp)) AS first_ns,
           max(epoch_ns(Timestamp)) AS last_ns
    FROM m
    GROUP BY selected
),
slotted AS (
    SELECT m.RunLabel, m.TraceId, m.SpanId, m.DominantStage, m.selected, epoch_ns(m.Timestamp) AS root_ns,
           (epoch_ns(m.Timestamp) - s.first_ns)
               // greatest(1, CAST((s.last_ns - s.first_ns + 1) * ceil(? / 16) / s.total AS BIGINT)) AS slot
    FROM m JOIN sides AS s ON s.selected = m.selected
),
drawn AS (
    SELECT selected, slot
    FROM (SELECT selected, slot, count(*) AS n FROM slotted GROUP BY selected, slot)
    QUALIFY row_number() OVER (
        PARTITION BY selected
        ORDER BY ln((hash(slot, selected) % 1000000007 + 1) / 1000000008.0) / n DESC, slot) <= 16
)
SELECT unnest(s, recursive := true)
FROM (
    SELECT unnest(arg_min({'RunLabel': RunLabel, 'TraceId': TraceId, 'RootSpanId': SpanId,
                           'DominantStage': DominantStage, 'selected': selected, 'RootNs': root_ns,
                           'Slot': slot}, hash(TraceId), ?)) AS s
    FROM slotted SEMI JOIN drawn ON drawn.selected = slotted.selected AND drawn.slot = slotted.slot
    GROUP BY slotted.selected
)
