-- Tail vs body's sample on ClickHouse (tail_sample_cte.sql), asked for first: tail_kv.sql then reads
-- only the seconds the sampled traces' spans start in (tailscope.store.clickhouse.sample). Rows: trace id,
-- root span id, dominant stage, side (selected), the seconds the filtered requests span and the
-- root's start (ns).
-- Params: the filter's, tail_selection.sql's (p1-p7), p8 the sample size per side.
{include:tail_selection},
{include:tail_sample_cte}
SELECT TraceId, RootSpanId, DominantStage, selected, span_s, RootNs
FROM sample
