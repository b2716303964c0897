-- span_tree.sql output: one row per span of each request subtree, with its names and ids.
SELECT s.TraceId, s.SpanId, s.ParentSpanId, s.SpanName, s.SpanKind, s.ServiceName, s.StatusCode,
       s.Duration, s.StartNs, w.EffStart, w.EffEnd, w.Depth, w.Stage, w.RuleNo, w.ExclusiveNs,
       w.AttributedNs, r.ClientSpanId, r.ClientDuration
FROM span_rows AS w
JOIN spans AS s ON s.TK = w.TK AND s.SK = w.SK AND s.PK = w.PK
JOIN request_root AS r ON r.TK = w.TK
