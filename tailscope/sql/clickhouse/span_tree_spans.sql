-- span_tree.sql's per-span output on ClickHouse, as ../span_tree_spans.sql (the Gantt): one row per
-- span of each request subtree, with its names and ids; ServiceName and StatusCode from the traces'
-- own rows; a phase span (made by a phase rule, RuleNo >= 20000, not stored) takes its parent span's
-- service and status 'Unset', as DuckDB's phase_spans.sql gives it. Both read within the selection's time range
-- (a span of the tree, or a phase span's parent, starts in it): for one trace, its seconds.
SELECT s.TraceId AS TraceId, s.SpanId AS SpanId, s.ParentSpanId AS ParentSpanId, s.SpanName AS SpanName,
       s.SpanKind AS SpanKind, coalesce(o.ServiceName, '') AS ServiceName,
       if(s.RuleNo >= 20000, 'Unset', ifNull(o.StatusCode, 'Unset')) AS StatusCode,
       s.Duration AS Duration, s.StartNs AS StartNs, w.EffStart AS EffStart, w.EffEnd AS EffEnd,
       w.Depth AS Depth, w.Stage AS Stage, w.RuleNo AS RuleNo, w.ExclusiveNs AS ExclusiveNs,
       w.AttributedNs AS AttributedNs, r.ClientSpanId AS ClientSpanId, r.ClientDuration AS ClientDuration
FROM span_rows AS w
JOIN _ts_spans AS s ON s.TK = w.TK AND s.SK = w.SK AND s.PK = w.PK
JOIN _ts_request_root AS r ON r.TK = w.TK
LEFT JOIN (  -- the traces' stored rows, read once: a span's own, or for a phase span its parent's
    SELECT TraceId, SpanId, toNullable(toString(any(ServiceName))) AS ServiceName,
           toNullable(toString(any(StatusCode))) AS StatusCode
    FROM otel_traces PREWHERE TraceId IN {sample_ids:Array(String)}
    WHERE Timestamp BETWEEN fromUnixTimestamp64Nano({run_start:Int64}) AND fromUnixTimestamp64Nano({run_end:Int64})
    GROUP BY TraceId, SpanId
) AS o ON o.TraceId = s.TraceId AND o.SpanId = if(s.RuleNo >= 20000, s.ParentSpanId, s.SpanId)
ORDER BY s.StartNs, s.SpanId
