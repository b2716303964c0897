-- Tail vs body's block sample, step 1 (tailscope.store.duckdb.tail_sample): the filtered requests of
-- each side per second of their roots' start (a slice), in time order, with the slice's first and
-- last root start (ns) and the tail threshold (ns; NULL for a rectangle). A side's requests in
-- (Timestamp, TraceId) order are then numbered from these counts alone, and the blocks drawn are
-- read by their slices only (tail_block_rows.sql).
-- Params: the filter's, tail_selection.sql's.
{include:tail_selection}
SELECT epoch_ns(m.Timestamp) // 1000000000 AS slice, m.selected, count(*) AS n,
       min(epoch_ns(m.Timestamp)) AS first_ns, max(epoch_ns(m.Timestamp)) AS last_ns,
       (SELECT qd FROM q) AS threshold_ns
FROM m
GROUP BY ALL
ORDER BY slice, selected
