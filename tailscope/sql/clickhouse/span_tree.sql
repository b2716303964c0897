-- span_tree.sql for ClickHouse: the same derivation as ../span_tree.sql (read that file's notes on
-- the steps: roots, trace_root, request_root, tier_roots, the recursive walk with intervals clipped
-- to the parent's, exclusive time, the sweep that splits overlapping branches' time evenly), written
-- for ClickHouse over the exporter's otel_traces. Differences, and why:
--   keys         cityHash64 of the ids instead of DuckDB's hash (only equality is used)
--   attributes   Map columns: SpanAttributes['tailscope.stage'] ('' when absent); AttrLines joins
--                the map's key=value pairs with newlines (DuckDB rewrites the JSON text the same way)
--   regexes      match() with (?i) (and (?m) for attribute lines): RE2 on both engines
--   covered      the union of a span's children's intervals with a running maximum end over the
--                children sorted by start (a window), integer arithmetic like DuckDB's list_reduce
--   rounding     floor(x + 0.5): ClickHouse's round() is half-to-even on floats, DuckDB's half away
--                from zero (attributed times are never negative)
--   no NULLs    an aggregate over an empty window frame is 0 here (NULL in DuckDB), and so is an
--                unmatched LEFT JOIN's column (join_use_nulls is off): every use is inside
--                greatest(..., PStart), greatest(..., EffStart), a sum or a `!= 0` test (hashes are
--                never 0 in practice), where 0 and NULL give the same
--   phases       phase rules (framework self-reported phases) are not applied on ClickHouse yet:
--                {phases} is an empty relation (ARCHITECTURE.md, "Not implemented yet")
-- Placeholders (fixed SQL from tailscope.query.clickhouse): scope, names, rule_case, phases, output.
-- Parameters: the scope's (run_start, run_end, run_filters), the rules' nr<i> / rk<i> / ra<i>,
-- server_rules (positions of rules naming span kind Server), stages (stage by rule position).
WITH RECURSIVE
names AS (
    SELECT DISTINCT SpanName FROM {scope}
),
name_hits AS (
    SELECT {names} FROM names
),
real_spans AS (
    SELECT
        cityHash64(t.TraceId) AS TK, cityHash64(t.SpanId) AS SK, cityHash64(t.ParentSpanId) AS PK,
        t.TraceId AS TraceId, t.SpanId AS SpanId, t.ParentSpanId AS ParentSpanId,
        toString(t.SpanName) AS SpanName, toString(t.SpanKind) AS SpanKind,
        toInt64(t.Duration) AS Duration,
        toUnixTimestamp64Nano(t.Timestamp) AS StartNs,
        toUnixTimestamp64Nano(t.Timestamp) + greatest(toInt64(t.Duration), 0) AS EndNs,
        CAST(if(t.RawStage IN ('ingress', 'queue', 'parsing', 'feature_hydration', 'preprocessing',
                               'model_forward', 'postprocessing', 'downstream', 'serialization',
                               'unattributed'), t.RawStage, NULL) AS Nullable(String)) AS AttrStage,
        CAST(if(t.RawStage IN ('ingress', 'queue', 'parsing', 'feature_hydration', 'preprocessing',
                               'model_forward', 'postprocessing', 'downstream', 'serialization',
                               'unattributed'), -1, {rule_case}) AS Nullable(Int64)) AS RuleNo
    FROM (SELECT *, SpanAttributes['tailscope.stage'] AS RawStage,
                 arrayStringConcat(arrayMap((k, v) -> concat(k, '=', v), mapKeys(SpanAttributes),
                                            mapValues(SpanAttributes)), '\n') AS AttrLines
          FROM {scope}) AS t
    JOIN name_hits AS h ON h.SpanName = t.SpanName
),
phase_rows AS (
{phases}
),
spans AS (
    SELECT TK, SK, PK, TraceId, SpanId, ParentSpanId, SpanName, SpanKind, Duration, StartNs, EndNs,
           AttrStage, RuleNo
    FROM real_spans
    UNION ALL
    SELECT cityHash64(TraceId), cityHash64(SpanId), cityHash64(ParentSpanId), TraceId, SpanId,
           ParentSpanId, SpanName, SpanKind, Duration, StartNs, StartNs + Duration, AttrStage, RuleNo
    FROM phase_rows
),
roots AS (
    SELECT s.TK AS TK, s.SK AS SK, s.ParentSpanId AS ParentSpanId, s.SpanKind AS SpanKind,
           s.Duration AS Duration, s.StartNs AS StartNs, s.SpanId AS SpanId
    FROM spans AS s LEFT ANTI JOIN spans AS p ON p.TK = s.TK AND p.SK = s.PK
),
trace_root AS (
    SELECT * FROM roots
    QUALIFY row_number() OVER (
        PARTITION BY TK ORDER BY (ParentSpanId = '') DESC, Duration DESC, StartNs, SpanId) = 1
),
server_child AS (
    SELECT c.TK AS TK, c.SK AS SK
    FROM trace_root AS r JOIN spans AS c ON c.TK = r.TK AND c.PK = r.SK
    WHERE r.SpanKind = 'Client' AND c.SpanKind = 'Server'
    QUALIFY row_number() OVER (PARTITION BY c.TK ORDER BY c.Duration DESC, c.StartNs, c.SpanId) = 1
),
request_root AS (
    SELECT r.TK AS TK,
           if(sc.TK != 0, sc.SK, r.SK) AS RootSK,
           if(sc.TK != 0, r.SpanId, NULL) AS ClientSpanId,
           if(sc.TK != 0, r.Duration, NULL) AS ClientDuration
    FROM trace_root AS r LEFT JOIN server_child AS sc ON sc.TK = r.TK
),
tier_roots AS (
    SELECT s.TK AS TK, s.SK AS SK
    FROM spans AS s LEFT SEMI JOIN spans AS c ON c.TK = s.TK AND c.PK = s.SK
    WHERE s.SpanKind = 'Server' AND s.AttrStage IS NULL
      -- a rule written for SERVER spans (span kind Server) is meant for them: it wins
      AND NOT has({server_rules:Array(Int64)}, coalesce(s.RuleNo, 0))
),
tree AS (
    SELECT s.TK AS TK, s.SK AS SK, s.PK AS PK, s.StartNs AS EffStart, s.EndNs AS EffEnd,
           s.StartNs AS PStart, toInt64(0) AS Depth,
           CAST(coalesce(s.AttrStage, 'ingress') AS String) AS Stage,
           CAST(if(s.AttrStage IS NOT NULL, -1, 0) AS Int64) AS RuleNo
    FROM spans AS s JOIN request_root AS r ON s.TK = r.TK AND s.SK = r.RootSK
    UNION ALL
    SELECT c.TK, c.SK, c.PK,
           least(greatest(c.StartNs, t.EffStart), t.EffEnd),
           greatest(least(greatest(c.StartNs, t.EffStart), t.EffEnd), least(c.EndNs, t.EffEnd)),
           t.EffStart,
           t.Depth + 1,
           CAST(multiIf(c.RuleNo = -1 OR c.RuleNo >= 20000, assumeNotNull(c.AttrStage),
                        tr.TK != 0, 'ingress',
                        c.RuleNo IS NOT NULL,
                        coalesce(arrayElement({stages:Array(Nullable(String))}, assumeNotNull(c.RuleNo)), ''),
                        t.Depth = 0 OR t.RuleNo = 10002, 'unattributed',
                        t.Stage) AS String),
           CAST(multiIf(c.RuleNo = -1 OR c.RuleNo >= 20000, assumeNotNull(c.RuleNo),
                        tr.TK != 0, 10002,
                        c.RuleNo IS NOT NULL, assumeNotNull(c.RuleNo),
                        t.Depth = 0 OR t.RuleNo = 10002, 10001,
                        10000) AS Int64)
    FROM tree AS t JOIN spans AS c ON c.TK = t.TK AND c.PK = t.SK
    LEFT JOIN tier_roots AS tr ON tr.TK = c.TK AND tr.SK = c.SK
    WHERE t.Depth < 64
),
walked AS (
    SELECT * FROM tree
),
child_runs AS (
    SELECT TK, PK, EffStart, EffEnd,
           max(EffEnd) OVER (
               PARTITION BY TK, PK ORDER BY EffStart, EffEnd
               ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS PrevMax,
           row_number() OVER (PARTITION BY TK, PK ORDER BY EffStart, EffEnd) AS Nth
    FROM walked
    WHERE Depth > 0
),
covered AS (
    -- each child adds what of it lies past the running maximum end of the children before it
    SELECT TK, PK AS SK,
           sum(if(Nth = 1, EffEnd - EffStart, greatest(0, EffEnd - greatest(EffStart, PrevMax)))) AS U,
           max(EffEnd) AS LastEnd
    FROM child_runs
    GROUP BY TK, PK
),
exclusive AS (
    SELECT w.TK AS TK, w.SK AS SK, w.PK AS PK, w.EffStart AS EffStart, w.EffEnd AS EffEnd,
           w.PStart AS PStart, w.Depth AS Depth, w.Stage AS Stage, w.RuleNo AS RuleNo,
           (w.EffEnd - w.EffStart) - coalesce(c.U, 0) AS ExclusiveNs, c.LastEnd AS LastEnd
    FROM walked AS w LEFT JOIN covered AS c ON c.TK = w.TK AND c.SK = w.SK
),
concurrent AS (
    SELECT TK
    FROM exclusive
    GROUP BY TK
    HAVING sum(ExclusiveNs) > anyIf(EffEnd - EffStart, Depth = 0)
),
children AS (
    SELECT TK, PK, EffStart, EffEnd, PStart,
           max(EffEnd) OVER (
               PARTITION BY TK, PK ORDER BY EffStart, EffEnd
               ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS PrevEnd
    FROM exclusive
    WHERE Depth > 0 AND TK IN (SELECT TK FROM concurrent)
),
self_intervals AS (
    SELECT TK, PK AS SK, greatest(PrevEnd, PStart) AS A, EffStart AS B
    FROM children
    WHERE EffStart > greatest(PrevEnd, PStart)
    UNION ALL
    SELECT TK, SK, greatest(coalesce(LastEnd, EffStart), EffStart) AS A, EffEnd AS B
    FROM exclusive
    WHERE TK IN (SELECT TK FROM concurrent)
      AND EffEnd > greatest(coalesce(LastEnd, EffStart), EffStart)
),
steps AS (
    SELECT TK, T, sum(D) AS D
    FROM (SELECT TK, A AS T, 1 AS D FROM self_intervals
          UNION ALL
          SELECT TK, B AS T, -1 AS D FROM self_intervals)
    GROUP BY TK, T
),
segments AS (
    SELECT TK, T AS S0,
           leadInFrame(toNullable(T)) OVER (PARTITION BY TK ORDER BY T
                                           ROWS BETWEEN CURRENT ROW AND 1 FOLLOWING) AS S1,
           sum(D) OVER (PARTITION BY TK ORDER BY T ROWS UNBOUNDED PRECEDING) AS Active
    FROM steps
),
shared AS (
    SELECT i.TK AS TK, i.SK AS SK,
           sum((least(assumeNotNull(g.S1), i.B) - greatest(g.S0, i.A)) / g.Active) AS Attributed
    FROM self_intervals AS i
    JOIN segments AS g ON g.TK = i.TK
    WHERE g.S1 IS NOT NULL AND g.S0 < i.B AND g.S1 > i.A AND g.Active > 0
    GROUP BY i.TK, i.SK
),
span_rows AS (
    SELECT w.TK AS TK, w.SK AS SK, w.PK AS PK, w.EffStart AS EffStart, w.EffEnd AS EffEnd,
           w.Depth AS Depth, w.Stage AS Stage, w.RuleNo AS RuleNo, w.ExclusiveNs AS ExclusiveNs,
           if(w.TK IN (SELECT TK FROM concurrent), coalesce(sh.Attributed, 0),
              toFloat64(w.ExclusiveNs)) AS AttributedNs
    FROM exclusive AS w
    LEFT JOIN shared AS sh ON sh.TK = w.TK AND sh.SK = w.SK
)
{output}
