-- Phase spans: the phases a span reports about itself (a serving framework's time breakdown, as
-- duration attributes or start/end events), as synthetic child spans of that span, one per phase,
-- with the stage of the phase rule that made it (tailscope.analysis.phases, the phase_rules table).
-- span_tree.sql walks them like any child span, so the waterfall, the percentiles and the diagnosis
-- see a vLLM request's queue / prefill / decode or a Triton request's queue / input / infer / output
-- as stages; what the framework does not account for stays with the span itself.
-- Placeholders filled by tailscope.store.duckdb.statements.phase_spans_query with fixed SQL (never values):
--   candidate_rows  the spans the rules could read: phase_candidates.sql over the scope (its own
--               placeholders: scope, candidates), or phase_candidates_staged.sql, the rows a derive
--               staged first (derive.py: it records whether the run has any, derive_state.PhaseCandidates)
--   scope       which otel_traces rows, as a relation (read twice: candidates, carriers' children)
-- Bound parameters besides the scope's: phase_candidates.sql's (unless staged), and the rules, as a
-- list of structs (factor: ns per unit, NULL for 'text'; start_at / end_at: the positions of their
-- keys in the path list phase_candidates.sql reads).
-- Attribute phases of one framework on one span are laid end to end in rule order from the span's
-- start, or placed so that the phase with an end_key ends at that offset from the span's start.
-- Event phases run from the span's first start event to the first end event after it, on the span
-- or on a direct child (the start event must be the span's own, so a phase is made once).
-- A phase fills only the part of its span's time that no child span of it covers (it may come out in
-- pieces: ids '<carrier>/phase<n>', then '.<gap start ns>' for pieces after a child's end).
-- RuleNo = 20000 + rule position.
WITH phase_candidates AS MATERIALIZED (
    {candidate_rows}
),
phase_rules_given AS MATERIALIZED (
    SELECT r.pos, r.grp, r.phase, r.stage, r.source, r.start_key, r.end_key, r.factor, r.name_regex,
           r.start_at, r.end_at
    FROM (SELECT unnest(?::STRUCT(pos INTEGER, grp VARCHAR, phase VARCHAR, stage VARCHAR, source VARCHAR,
                                  start_key VARCHAR, end_key VARCHAR, factor DOUBLE, name_regex VARCHAR,
                                  start_at INTEGER, end_at INTEGER)[]) AS r)
),
-- which rules apply to which span name: name regexes run once per distinct name, not per span
rules_by_name AS MATERIALIZED (
    SELECT n.SpanName, r.pos
    FROM (SELECT DISTINCT SpanName FROM phase_candidates) AS n, phase_rules_given AS r
    WHERE r.name_regex IS NULL OR regexp_matches(n.SpanName, r.name_regex, 'i')
),
attribute_raw AS (
    SELECT c.TraceId, c.SpanId, c.CK, c.SpanName, c.ServiceName, c.ResourceAttributes, c.StartNs,
           r.pos, r.grp, r.phase, r.stage, r.factor,
           c.RuleValues[r.start_at] AS RawDur,
           CASE WHEN r.end_at IS NOT NULL THEN c.RuleValues[r.end_at] END AS RawEnd
    FROM phase_candidates AS c
    JOIN rules_by_name AS n ON n.SpanName = c.SpanName
    JOIN phase_rules_given AS r ON r.pos = n.pos AND r.source = 'attribute'
    WHERE contains(c.SpanAttributes, '"' || r.start_key || '":')  -- only the rules whose key it has
),
attribute_values AS (
    -- duration and end offset in ns: a number times the unit's factor, or a number with its unit
    -- ("12.5ms", "850µs", "1.2s": Rust's Duration Debug text, as TGI records it)
    SELECT *,
           CASE WHEN factor IS NOT NULL THEN try_cast(RawDur AS DOUBLE) * factor
                ELSE try_cast(regexp_extract(RawDur, '^\s*([0-9.eE+-]+)\s*([a-zµμ]+)\s*$', 1) AS DOUBLE)
                     * CASE regexp_extract(RawDur, '^\s*([0-9.eE+-]+)\s*([a-zµμ]+)\s*$', 2)
                           WHEN 'ns' THEN 1 WHEN 'us' THEN 1e3 WHEN 'µs' THEN 1e3 WHEN 'μs' THEN 1e3
                           WHEN 'ms' THEN 1e6 WHEN 's' THEN 1e9 WHEN 'm' THEN 6e10
                           WHEN 'min' THEN 6e10 WHEN 'h' THEN 3.6e12 END
           END AS Dur,
           CASE WHEN RawEnd IS NULL THEN NULL
                WHEN factor IS NOT NULL THEN try_cast(RawEnd AS DOUBLE) * factor
                ELSE try_cast(regexp_extract(RawEnd, '^\s*([0-9.eE+-]+)\s*([a-zµμ]+)\s*$', 1) AS DOUBLE)
                     * CASE regexp_extract(RawEnd, '^\s*([0-9.eE+-]+)\s*([a-zµμ]+)\s*$', 2)
                           WHEN 'ns' THEN 1 WHEN 'us' THEN 1e3 WHEN 'µs' THEN 1e3 WHEN 'μs' THEN 1e3
                           WHEN 'ms' THEN 1e6 WHEN 's' THEN 1e9 WHEN 'm' THEN 6e10
                           WHEN 'min' THEN 6e10 WHEN 'h' THEN 3.6e12 END
           END AS EndOffset
    FROM attribute_raw
),
attribute_phases AS (
    SELECT * FROM attribute_values WHERE Dur > 0
),
-- where each phase starts within its framework's chain on the span: the durations of the phases
-- before it (a self-join: a span has a few phases, and a join is cheaper here than a window)
attribute_before AS (
    SELECT a.CK, a.grp, a.pos, coalesce(sum(b.Dur), 0) AS Before
    FROM attribute_phases AS a
    LEFT JOIN attribute_phases AS b ON b.CK = a.CK AND b.grp = a.grp AND b.pos < a.pos
    GROUP BY a.CK, a.grp, a.pos
),
-- the chain's start: the span's start, or where the anchored phase (with an end offset) puts it
attribute_chain AS (
    SELECT a.CK, a.grp, greatest(coalesce(max(a.EndOffset - (b.Before + a.Dur)), 0), 0) AS ChainStart
    FROM attribute_phases AS a
    JOIN attribute_before AS b ON b.CK = a.CK AND b.grp = a.grp AND b.pos = a.pos
    GROUP BY a.CK, a.grp
),
attribute_placed AS (
    SELECT a.TraceId, a.SpanId, a.CK, a.SpanName, a.ServiceName, a.ResourceAttributes, a.pos, a.phase,
           a.stage, a.Dur, a.StartNs + b.Before + c.ChainStart AS A
    FROM attribute_phases AS a
    JOIN attribute_before AS b ON b.CK = a.CK AND b.grp = a.grp AND b.pos = a.pos
    JOIN attribute_chain AS c ON c.CK = a.CK AND c.grp = a.grp
),
event_own AS (
    SELECT TraceId, SpanId, ParentSpanId, e.Name AS Name, min(e.Timestamp) AS T
    FROM (SELECT TraceId, SpanId, ParentSpanId,
                 unnest(from_json(Events, '[{"Timestamp":"BIGINT","Name":"VARCHAR"}]')) AS e
          FROM phase_candidates
          WHERE Events <> '[]')
    GROUP BY ALL
),
-- an end event may sit on the span or on a direct child: Triton's model span has QUEUE_START, its
-- compute child span COMPUTE_START (the queue ends where compute starts)
event_ends AS (
    SELECT TraceId, SpanId, Name, T FROM event_own
    UNION ALL
    SELECT TraceId, ParentSpanId, Name, T FROM event_own WHERE ParentSpanId <> ''
),
event_placed AS (
    SELECT c.TraceId, c.SpanId, c.CK, c.SpanName, c.ServiceName, c.ResourceAttributes, r.pos, r.phase,
           r.stage, s.T AS A, CAST(min(e.T) - s.T AS DOUBLE) AS Dur
    FROM phase_candidates AS c
    JOIN rules_by_name AS n ON n.SpanName = c.SpanName
    JOIN phase_rules_given AS r ON r.pos = n.pos AND r.source = 'events'
    JOIN event_own AS s ON s.TraceId = c.TraceId AND s.SpanId = c.SpanId AND s.Name = r.start_key
    JOIN event_ends AS e ON e.TraceId = c.TraceId AND e.SpanId = c.SpanId AND e.Name = r.end_key AND e.T > s.T
    GROUP BY c.TraceId, c.SpanId, c.CK, c.SpanName, c.ServiceName, c.ResourceAttributes, r.pos, r.phase,
             r.stage, s.T
),
placed AS (
    SELECT * FROM attribute_placed UNION ALL BY NAME SELECT * FROM event_placed
),
-- a phase fills only its span's own time: where a child span of the carrier runs, the child says what
-- that time is (TGI's generate span reports durations that its queued / infer children also cover;
-- a Triton ensemble's queue runs until its first member's compute, over the member's own span)
carrier_children AS MATERIALIZED (
    SELECT o.TraceId, o.ParentSpanId AS CarrierId, epoch_ns(o.Timestamp) AS S,
           epoch_ns(o.Timestamp) + greatest(o.Duration, 0) AS E
    FROM {scope} AS o
    SEMI JOIN phase_candidates AS c ON c.TraceId = o.TraceId AND c.SpanId = o.ParentSpanId
),
child_runs AS (
    SELECT TraceId, CarrierId, S, E,
           max(E) OVER (PARTITION BY TraceId, CarrierId ORDER BY S, E
                        ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS PrevEnd
    FROM carrier_children
),
gaps AS (  -- the carrier's time no child covers, as [GA, GB) pieces; a carrier without children: all
    SELECT TraceId, CarrierId, coalesce(PrevEnd, -4611686018427387904) AS GA, S AS GB
    FROM child_runs
    WHERE S > coalesce(PrevEnd, -4611686018427387904)
    UNION ALL
    SELECT TraceId, CarrierId, max(E), 4611686018427387904 FROM carrier_children GROUP BY TraceId, CarrierId
    UNION ALL
    SELECT DISTINCT p.TraceId, p.SpanId, -4611686018427387904, 4611686018427387904
    FROM placed AS p
    ANTI JOIN carrier_children AS k ON k.TraceId = p.TraceId AND k.CarrierId = p.SpanId
),
pieces AS (
    SELECT p.*, greatest(p.A, g.GA) AS PA, least(p.A + p.Dur, g.GB) AS PB, g.GA
    FROM placed AS p
    JOIN gaps AS g ON g.TraceId = p.TraceId AND g.CarrierId = p.SpanId
    WHERE least(p.A + p.Dur, g.GB) > greatest(p.A, g.GA)
)
SELECT TraceId,
       SpanId || '/phase' || pos || CASE WHEN GA = -4611686018427387904 THEN '' ELSE '.' || GA END AS SpanId,
       SpanId AS ParentSpanId, phase AS SpanName,
       'Internal' AS SpanKind, ServiceName, ResourceAttributes, 'Unset' AS StatusCode,
       CAST(round(PA) AS BIGINT) AS StartNs, CAST(round(PB - PA) AS BIGINT) AS Duration, stage AS Stage,
       20000 + pos AS RuleNo
FROM pieces
