-- Span-level derivation for a set of traces: request root, effective interval, depth, stage and
-- exclusive time of every span in each trace's request subtree.
-- Placeholders filled by tailscope.query.builders.span_tree_query with fixed SQL (never with values):
--   scope      which otel_traces rows (e.g. the run's), used twice
--   names      the distinct-span-name columns of the name regexes (nh1, nh2, ...)
--   rule_case  the CASE giving the first matching stage rule's position
-- Steps:
--   spans        the scope's spans, with the explicit tailscope.stage attribute and the matching rule.
--                Name regexes run once per distinct SpanName (name_hits), not once per span: a regex
--                over 10 M names costs ~1 s on 2 cores, over the ~20 distinct names nothing.
--   roots        spans whose parent is not in the trace (ParentSpanId '' or a missing parent)
--   trace_root   one per trace: a true root first, then the longest, then the earliest
--   request_root a CLIENT root with a SERVER child hands the request over to that child, and is kept
--                only for its client-observed duration
--   tree         recursive walk down from the request root. Each span's effective interval is its own
--                clipped to its parent's effective interval, so children that outlast their parent
--                are cut and the exclusive times of a request add up to the root's duration exactly.
--                Depth is capped at 64 so a malformed trace (repeated ids) cannot loop.
--   covered      the union of each span's children's effective intervals (sorted sweep with a running
--                maximum of end times, so parallel or overlapping children are counted once).
--                ExclusiveNs = effective duration - that union: the span's self time.
--   self_intervals the gaps of each span not covered by a child: where the span itself is "leaf-active".
--   concurrent   traces whose self intervals overlap (parallel branches), i.e. whose self times add
--                up to more than the root's duration. Only these take the sweep below.
--   shared       the sweep: each elementary segment of time is split evenly between the spans that are
--                leaf-active in it. AttributedNs = the span's share, equal to ExclusiveNs in traces
--                without parallel branches. Attributed times of a request add up to the root's
--                duration exactly (up to float rounding, which derive_requests gives to unattributed).
WITH RECURSIVE
names AS MATERIALIZED (
    SELECT DISTINCT SpanName FROM otel_traces WHERE RunLabel = ? AND TraceId = ?
),
name_hits AS MATERIALIZED (
    SELECT SpanName, regexp_matches(SpanName, ?, 'i') AS nh1 FROM names
),
spans AS MATERIALIZED (
    SELECT
        t.TraceId, t.SpanId, t.ParentSpanId, t.SpanName, t.SpanKind, t.ServiceName, t.StatusCode,
        t.Duration,
        epoch_ns(t.Timestamp) AS StartNs,
        epoch_ns(t.Timestamp) + greatest(t.Duration, 0) AS EndNs,
        CASE WHEN list_contains(?::VARCHAR[], t.SpanAttributes['tailscope.stage'])
             THEN t.SpanAttributes['tailscope.stage'] END AS AttrStage,
        CASE WHEN list_contains(?::VARCHAR[], t.SpanAttributes['tailscope.stage']) THEN -1
             ELSE CASE WHEN SpanKind = ? THEN 1 WHEN nh1 THEN 2 WHEN SpanKind = ? AND len(list_filter(map_entries(SpanAttributes), lambda a: regexp_matches(a.key || '=' || a.value, ?, 'i'))) > 0 THEN 3 END END AS RuleNo
    FROM otel_traces AS t JOIN name_hits AS h ON h.SpanName = t.SpanName
    WHERE RunLabel = ? AND TraceId = ?
),
roots AS (
    SELECT s.TraceId, s.SpanId, s.ParentSpanId, s.SpanKind, s.Duration, s.StartNs
    FROM spans AS s ANTI JOIN spans AS p ON p.TraceId = s.TraceId AND p.SpanId = s.ParentSpanId
),
trace_root AS (
    SELECT * FROM roots
    QUALIFY row_number() OVER (
        PARTITION BY TraceId ORDER BY (ParentSpanId = '') DESC, Duration DESC, StartNs, SpanId) = 1
),
server_child AS (
    SELECT c.TraceId, c.SpanId
    FROM trace_root AS r JOIN spans AS c ON c.TraceId = r.TraceId AND c.ParentSpanId = r.SpanId
    WHERE r.SpanKind = 'Client' AND c.SpanKind = 'Server'
    QUALIFY row_number() OVER (PARTITION BY c.TraceId ORDER BY c.Duration DESC, c.StartNs, c.SpanId) = 1
),
request_root AS (
    SELECT r.TraceId,
           coalesce(sc.SpanId, r.SpanId) AS RootSpanId,
           CASE WHEN sc.SpanId IS NOT NULL THEN r.SpanId END AS ClientSpanId,
           CASE WHEN sc.SpanId IS NOT NULL THEN r.Duration END AS ClientDuration
    FROM trace_root AS r LEFT JOIN server_child AS sc ON sc.TraceId = r.TraceId
),
tree(TraceId, SpanId, ParentSpanId, SpanName, SpanKind, ServiceName, StatusCode, Duration, StartNs,
     EffStart, EffEnd, PStart, PEnd, Depth, Stage, RuleNo) AS (
    SELECT s.TraceId, s.SpanId, s.ParentSpanId, s.SpanName, s.SpanKind, s.ServiceName, s.StatusCode,
           s.Duration, s.StartNs, s.StartNs, s.EndNs, s.StartNs, s.EndNs, 0,
           coalesce(s.AttrStage, 'ingress'),
           CASE WHEN s.AttrStage IS NOT NULL THEN -1 ELSE 0 END
    FROM spans AS s JOIN request_root AS r ON s.TraceId = r.TraceId AND s.SpanId = r.RootSpanId
    UNION ALL
    SELECT c.TraceId, c.SpanId, c.ParentSpanId, c.SpanName, c.SpanKind, c.ServiceName, c.StatusCode,
           c.Duration, c.StartNs,
           least(greatest(c.StartNs, t.EffStart), t.EffEnd),
           greatest(least(greatest(c.StartNs, t.EffStart), t.EffEnd), least(c.EndNs, t.EffEnd)),
           t.EffStart, t.EffEnd,
           t.Depth + 1,
           CASE WHEN c.RuleNo = -1 THEN c.AttrStage
                WHEN c.RuleNo IS NOT NULL THEN list_extract(?::VARCHAR[], c.RuleNo)
                WHEN t.Depth = 0 THEN 'unattributed'
                ELSE t.Stage END,
           CASE WHEN c.RuleNo IS NOT NULL THEN c.RuleNo
                WHEN t.Depth = 0 THEN 10001
                ELSE 10000 END
    FROM tree AS t JOIN spans AS c ON c.TraceId = t.TraceId AND c.ParentSpanId = t.SpanId
    WHERE t.Depth < 64
),
walked AS MATERIALIZED (
    SELECT * FROM tree
),
children AS (
    SELECT TraceId, ParentSpanId, EffStart, EffEnd, PStart,
           max(EffEnd) OVER (
               PARTITION BY TraceId, ParentSpanId ORDER BY EffStart, EffEnd
               ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS PrevEnd
    FROM walked
    WHERE Depth > 0
),
covered AS (
    SELECT TraceId, ParentSpanId AS SpanId,
           sum(greatest(0, EffEnd - greatest(EffStart, coalesce(PrevEnd, EffStart)))) AS Covered,
           max(EffEnd) AS LastEnd
    FROM children
    GROUP BY TraceId, ParentSpanId
),
self_intervals AS MATERIALIZED (
    SELECT TraceId, ParentSpanId AS SpanId, greatest(coalesce(PrevEnd, PStart), PStart) AS A, EffStart AS B
    FROM children
    WHERE EffStart > greatest(coalesce(PrevEnd, PStart), PStart)
    UNION ALL
    SELECT w.TraceId, w.SpanId, greatest(coalesce(c.LastEnd, w.EffStart), w.EffStart) AS A, w.EffEnd AS B
    FROM walked AS w LEFT JOIN covered AS c ON c.TraceId = w.TraceId AND c.SpanId = w.SpanId
    WHERE w.EffEnd > greatest(coalesce(c.LastEnd, w.EffStart), w.EffStart)
),
concurrent AS MATERIALIZED (
    SELECT i.TraceId
    FROM self_intervals AS i
    GROUP BY i.TraceId
    HAVING sum(i.B - i.A) > (SELECT any_value(w.EffEnd - w.EffStart) FROM walked AS w
                             WHERE w.TraceId = i.TraceId AND w.Depth = 0)
),
steps AS (
    SELECT TraceId, T, sum(D) AS D
    FROM (SELECT i.TraceId, i.A AS T, 1 AS D FROM self_intervals AS i SEMI JOIN concurrent USING (TraceId)
          UNION ALL
          SELECT i.TraceId, i.B AS T, -1 AS D FROM self_intervals AS i SEMI JOIN concurrent USING (TraceId))
    GROUP BY TraceId, T
),
segments AS (
    SELECT TraceId, T AS S0,
           lead(T) OVER (PARTITION BY TraceId ORDER BY T) AS S1,
           sum(D) OVER (PARTITION BY TraceId ORDER BY T ROWS UNBOUNDED PRECEDING) AS Active
    FROM steps
),
shared AS (
    SELECT i.TraceId, i.SpanId, sum((least(g.S1, i.B) - greatest(g.S0, i.A)) / g.Active) AS Attributed
    FROM self_intervals AS i
    JOIN segments AS g ON g.TraceId = i.TraceId AND g.S0 < i.B AND g.S1 > i.A AND g.Active > 0
    GROUP BY i.TraceId, i.SpanId
)
SELECT w.TraceId, w.SpanId, w.ParentSpanId, w.SpanName, w.SpanKind, w.ServiceName, w.StatusCode,
       w.Duration, w.StartNs, w.EffStart, w.EffEnd, w.Depth, w.Stage, w.RuleNo,
       (w.EffEnd - w.EffStart) - coalesce(c.Covered, 0) AS ExclusiveNs,
       CASE WHEN x.TraceId IS NULL THEN CAST((w.EffEnd - w.EffStart) - coalesce(c.Covered, 0) AS DOUBLE)
            ELSE coalesce(sh.Attributed, 0) END AS AttributedNs,
       r.ClientSpanId, r.ClientDuration
FROM walked AS w
JOIN request_root AS r ON r.TraceId = w.TraceId
LEFT JOIN covered AS c ON c.TraceId = w.TraceId AND c.SpanId = w.SpanId
LEFT JOIN concurrent AS x ON x.TraceId = w.TraceId
LEFT JOIN shared AS sh ON sh.TraceId = w.TraceId AND sh.SpanId = w.SpanId
-- params: ["r1", "abababababababababababababababab", "forward", ["ingress", "queue", "parsing", "feature_hydration", "preprocessing", "model_forward", "postprocessing", "downstream", "serialization", "unattributed"], ["ingress", "queue", "parsing", "feature_hydration", "preprocessing", "model_forward", "postprocessing", "downstream", "serialization", "unattributed"], "Consumer", "Client", "^http\\.", "r1", "abababababababababababababababab", ["queue", "model_forward", "downstream"]]
