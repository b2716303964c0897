-- ClickHouse span tree, step 2 of 5: each trace's request root (see span_tree.sql: roots,
-- trace_root, request_root), over the spans of step 1.
CREATE TEMPORARY TABLE _ts_request_root ENGINE = Memory AS
WITH
roots AS (
    SELECT s.TK AS TK, s.SK AS SK, s.ParentSpanId AS ParentSpanId, s.SpanKind AS SpanKind,
           s.Duration AS Duration, s.StartNs AS StartNs, s.SpanId AS SpanId
    FROM _ts_spans AS s LEFT ANTI JOIN _ts_spans AS p ON p.TK = s.TK AND p.SK = s.PK
),
trace_root AS (
    SELECT * FROM roots
    QUALIFY row_number() OVER (
        PARTITION BY TK ORDER BY (ParentSpanId = '') DESC, Duration DESC, StartNs, SpanId) = 1
),
server_child AS (
    SELECT c.TK AS TK, c.SK AS SK
    FROM trace_root AS r JOIN _ts_spans AS c ON c.TK = r.TK AND c.PK = r.SK
    WHERE r.SpanKind = 'Client' AND c.SpanKind = 'Server'
    QUALIFY row_number() OVER (PARTITION BY c.TK ORDER BY c.Duration DESC, c.StartNs, c.SpanId) = 1
)
    SELECT r.TK AS TK,
           if(sc.TK != 0, sc.SK, r.SK) AS RootSK,
           if(sc.TK != 0, r.SpanId, NULL) AS ClientSpanId,
           if(sc.TK != 0, r.Duration, NULL) AS ClientDuration
    FROM trace_root AS r LEFT JOIN server_child AS sc ON sc.TK = r.TK
