-- Which sampled traces have no span outside the run where a sampled view reads them
-- (sample_rows.sql's _ts_sample_rows: every span of theirs there, the run's attribute filters not
-- applied), so the span tree takes their spans from there (statements.sample_scope): those
-- whose spans there are as many as their request's derived SpanCount (the spans of its tree) and
-- its client root span when it has one (ClientDuration), all spans of the run, a subset of them;
-- with no span id twice (two spans sharing an id could make the tree count a span twice).
-- Params: run, sample_ids.
SELECT o.TraceId
FROM (
    SELECT TraceId, count() AS n, uniqExact(SpanId) AS distinct_ids FROM _ts_sample_rows GROUP BY TraceId
) AS o
INNER JOIN (
    SELECT TraceId, SpanCount + if(ClientDuration IS NULL, 0, 1) AS spans FROM tailscope_requests
    WHERE RunLabel = {run:String} AND TraceId IN {sample_ids:Array(String)}
) AS r ON o.TraceId = r.TraceId
WHERE o.n = o.distinct_ids AND o.n = r.spans
