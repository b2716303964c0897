-- Phase spans: the phases a span reports about itself (a serving framework's time breakdown, as
-- duration attributes or start/end events), as synthetic child spans of that span, one per phase,
-- with the stage of the phase rule that made it (tailscope.analysis.phases, the phase_rules table).
-- span_tree.sql walks them like any child span, so the waterfall, the percentiles and the diagnosis
-- see a vLLM request's queue / prefill / decode or a Triton request's queue / input / infer / output
-- as stages; what the framework does not account for stays with the span itself.
-- Placeholders filled by tailscope.query.builders.phase_spans_query with fixed SQL (never values):
--   scope       which otel_traces rows, as a relation (read twice: candidates, carriers' children)
--   candidates  an OR of contains() tests (keys and event names are bound parameters): only spans
--               that carry one of the rules' attribute keys or event names are looked at, so a run
--               without framework phases pays one substring scan
-- Then one bound parameter: the rules, as a list of structs (factor: ns per unit; NULL for 'text').
-- Attribute phases of one framework on one span are laid end to end in rule order from the span's
-- start, or placed so that the phase with an end_key ends at that offset from the span's start.
-- Event phases run from the span's first start event to the first end event after it, on the span
-- or on a direct child (the start event must be the span's own, so a phase is made once).
-- A phase fills only the part of its span's time that no child span of it covers (it may come out in
-- pieces: ids '<carrier>/phase<n>', '.2', '.3' ...). RuleNo = 20000 + rule position.
WITH phase_candidates AS MATERIALIZED (
    SELECT TraceId, SpanId, ParentSpanId, SpanName, ServiceName, ResourceAttributes, SpanAttributes, Events,
           epoch_ns(Timestamp) AS StartNs
    FROM {scope}
    WHERE {candidates}
),
phase_rules_given AS MATERIALIZED (
    SELECT r.pos, r.grp, r.phase, r.stage, r.source, r.start_key, r.end_key, r.factor, r.name_regex
    FROM (SELECT unnest(?::STRUCT(pos INTEGER, grp VARCHAR, phase VARCHAR, stage VARCHAR, source VARCHAR,
                                  start_key VARCHAR, end_key VARCHAR, factor DOUBLE,
                                  name_regex VARCHAR)[]) AS r)
),
attribute_raw AS (
    SELECT c.TraceId, c.SpanId, c.SpanName, c.ServiceName, c.ResourceAttributes, c.StartNs,
           r.pos, r.grp, r.phase, r.stage,
           -- [duration, end offset] in ns: a number times the unit's factor, or a number with its
           -- unit ("12.5ms", "850µs", "1.2s": Rust's Duration Debug text, as TGI records it)
           list_transform(
               [c.SpanAttributes->>r.start_key, c.SpanAttributes->>r.end_key],
               lambda v: CASE WHEN r.factor IS NOT NULL THEN try_cast(v AS DOUBLE) * r.factor
                         ELSE try_cast(regexp_extract(v, '^\s*([0-9.eE+-]+)\s*([a-zµμ]+)\s*$', 1) AS DOUBLE)
                              * CASE regexp_extract(v, '^\s*([0-9.eE+-]+)\s*([a-zµμ]+)\s*$', 2)
                                    WHEN 'ns' THEN 1 WHEN 'us' THEN 1e3 WHEN 'µs' THEN 1e3 WHEN 'μs' THEN 1e3
                                    WHEN 'ms' THEN 1e6 WHEN 's' THEN 1e9 WHEN 'm' THEN 6e10
                                    WHEN 'min' THEN 6e10 WHEN 'h' THEN 3.6e12 END
                    END) AS V
    FROM phase_candidates AS c
    JOIN phase_rules_given AS r ON r.source = 'attribute'
    WHERE r.name_regex IS NULL OR regexp_matches(c.SpanName, r.name_regex, 'i')
),
attribute_phases AS (
    SELECT *, V[1] AS Dur, V[2] AS EndOffset,
           coalesce(sum(V[1]) OVER (PARTITION BY TraceId, SpanId, grp ORDER BY pos
                                    ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0) AS Before
    FROM attribute_raw
    WHERE V[1] > 0
),
attribute_placed AS (
    SELECT TraceId, SpanId, SpanName, ServiceName, ResourceAttributes, pos, phase, stage, Dur,
           StartNs + Before + greatest(coalesce(max(EndOffset - (Before + Dur)) OVER (
               PARTITION BY TraceId, SpanId, grp), 0), 0) AS A
    FROM attribute_phases
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
    SELECT c.TraceId, c.SpanId, c.SpanName, c.ServiceName, c.ResourceAttributes, r.pos, r.phase, r.stage,
           s.T AS A, CAST(min(e.T) - s.T AS DOUBLE) AS Dur
    FROM phase_candidates AS c
    JOIN phase_rules_given AS r ON r.source = 'events'
    JOIN event_own AS s ON s.TraceId = c.TraceId AND s.SpanId = c.SpanId AND s.Name = r.start_key
    JOIN event_ends AS e ON e.TraceId = c.TraceId AND e.SpanId = c.SpanId AND e.Name = r.end_key AND e.T > s.T
    WHERE r.name_regex IS NULL OR regexp_matches(c.SpanName, r.name_regex, 'i')
    GROUP BY c.TraceId, c.SpanId, c.SpanName, c.ServiceName, c.ResourceAttributes, r.pos, r.phase, r.stage, s.T
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
    SELECT p.*, greatest(p.A, g.GA) AS PA, least(p.A + p.Dur, g.GB) AS PB,
           row_number() OVER (PARTITION BY p.TraceId, p.SpanId, p.pos ORDER BY g.GA) AS piece
    FROM placed AS p
    JOIN gaps AS g ON g.TraceId = p.TraceId AND g.CarrierId = p.SpanId
    WHERE least(p.A + p.Dur, g.GB) > greatest(p.A, g.GA)
)
SELECT TraceId, SpanId || '/phase' || pos || CASE WHEN piece > 1 THEN '.' || piece ELSE '' END AS SpanId,
       SpanId AS ParentSpanId, phase AS SpanName,
       'Internal' AS SpanKind, ServiceName, ResourceAttributes, 'Unset' AS StatusCode,
       CAST(round(PA) AS BIGINT) AS StartNs, CAST(round(PB - PA) AS BIGINT) AS Duration, stage AS Stage,
       20000 + pos AS RuleNo
FROM pieces
