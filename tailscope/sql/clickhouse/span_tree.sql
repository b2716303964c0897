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
--   phases       clickhouse/phase_spans.sql (the default phase rules: they cannot be edited on a
--                ClickHouse store yet), read in step 1
-- Steps 1-5 (span_tree_1_spans.sql ... span_tree_5_exclusive.sql) fill temporary tables: the run's
-- spans (_ts_spans), request roots (_ts_request_root), tier roots, the walk (_ts_walked) and the
-- exclusive times (_ts_exclusive). This statement is the rest: which traces have overlapping
-- branches, the sweep, and the per-span rows, ending in {output} (span_tree_requests.sql or
-- derive_requests.sql), which may read span_rows, _ts_request_root and _ts_spans.
-- Parameters of the steps: the scope's (run_start, run_end, run_filter_keys / _values), the rules' nr<i> / rk<i> /
-- ra<i>, server_rules (positions of rules naming span kind Server), stages (stage by rule position).
WITH
concurrent AS (
    SELECT TK
    FROM _ts_exclusive
    GROUP BY TK
    HAVING sum(ExclusiveNs) > anyIf(EffEnd - EffStart, Depth = 0)
),
children AS (
    SELECT TK, PK, EffStart, EffEnd, PStart,
           max(EffEnd) OVER (
               PARTITION BY TK, PK ORDER BY EffStart, EffEnd
               ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS PrevEnd
    FROM _ts_exclusive
    WHERE Depth > 0 AND TK IN (SELECT TK FROM concurrent)
),
self_intervals AS (
    SELECT TK, PK AS SK, greatest(PrevEnd, PStart) AS A, EffStart AS B
    FROM children
    WHERE EffStart > greatest(PrevEnd, PStart)
    UNION ALL
    SELECT TK, SK, greatest(coalesce(LastEnd, EffStart), EffStart) AS A, EffEnd AS B
    FROM _ts_exclusive
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
    FROM _ts_exclusive AS w
    LEFT JOIN shared AS sh ON sh.TK = w.TK AND sh.SK = w.SK
)
{output}
