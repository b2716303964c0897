-- The derive's per-request temp table (what derive_requests.sql reads) from _ts_tree_rows
-- (span_tree.sql with the span_tree_paths.sql output) and the path nodes in span_paths (for the
-- span names). Parameter: statements.SPAN_TIMES_MAX_HASH.
CREATE TEMP TABLE _ts_request_rows AS
SELECT q.TraceId, q.SpanId, q.ClientDuration, c.SpanCount, s.* EXCLUDE (TK), q.RootNs
FROM (SELECT * FROM temp._ts_tree_rows WHERE Part = 'request') AS q
JOIN (SELECT TK, CAST(sum(Spans) AS INTEGER) AS SpanCount FROM temp._ts_tree_rows WHERE Part = 'path' GROUP BY TK) AS c
    ON c.TK = q.TK
JOIN ({sums}) AS s ON s.TK = q.TK
