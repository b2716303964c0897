-- Phase spans for ClickHouse: ../phase_spans.sql (read its notes: which spans carry phases, how
-- attribute phases are chained and anchored, how event phases run from a start event to the first
-- end event after it, on the span or a direct child, and how a phase fills only the time no child
-- span of its carrier covers), over the exporter's Map attributes and Nested events. Differences:
--   rules      the phase rules as parallel arrays (ph_pos, ph_grp, ...), zipped here, not a list of
--              structs; candidates by key (mapContains / has(`Events.Name`, ...)) instead of
--              substring tests on JSON text
--   before     each phase's start within its framework's chain: a window sum over the phases before
--              it instead of a self-join
--   rounding   floor(x + 0.5) for DuckDB's round() (half away from zero; times are positive)
-- Placeholder (fixed SQL): scope, the run's spans, read twice. Output columns: those span_tree's
-- steps and the diagnosis read (Stage as AttrStage, RuleNo = 20000 + the rule's position).
WITH phase_rules_given AS (
    SELECT tupleElement(r, 1) AS pos, tupleElement(r, 2) AS grp, tupleElement(r, 3) AS phase,
           tupleElement(r, 4) AS stage, tupleElement(r, 5) AS source, tupleElement(r, 6) AS start_key,
           tupleElement(r, 7) AS end_key, tupleElement(r, 8) AS factor, tupleElement(r, 9) AS name_regex
    FROM (SELECT arrayJoin(arrayZip({ph_pos:Array(Int64)}, {ph_grp:Array(String)}, {ph_phase:Array(String)},
                                    {ph_stage:Array(String)}, {ph_source:Array(String)},
                                    {ph_start_key:Array(String)}, {ph_end_key:Array(Nullable(String))},
                                    {ph_factor:Array(Nullable(Float64))},
                                    {ph_name_regex:Array(Nullable(String))})) AS r)
),
phase_candidates AS (
    SELECT TraceId, SpanId, cityHash64(TraceId, SpanId) AS CK, ParentSpanId, toString(SpanName) AS SpanName,
           toString(ServiceName) AS ServiceName, ResourceAttributes, SpanAttributes,
           `Events.Name` AS EventNames, arrayMap(t -> toUnixTimestamp64Nano(t), `Events.Timestamp`) AS EventTimes,
           toUnixTimestamp64Nano(Timestamp) AS StartNs
    FROM {scope} AS t
    WHERE hasAny(mapKeys(SpanAttributes), {ph_attribute_keys:Array(String)})
       OR hasAny(`Events.Name`, {ph_event_keys:Array(String)})
),
rules_by_name AS (
    SELECT n.SpanName AS SpanName, r.pos AS pos
    FROM (SELECT DISTINCT SpanName FROM phase_candidates) AS n CROSS JOIN phase_rules_given AS r
    WHERE r.name_regex IS NULL OR match(n.SpanName, concat('(?i)', assumeNotNull(r.name_regex)))
),
attribute_raw AS (
    SELECT c.TraceId AS TraceId, c.SpanId AS SpanId, c.CK AS CK, c.SpanName AS SpanName,
           c.ServiceName AS ServiceName, c.ResourceAttributes AS ResourceAttributes, c.StartNs AS StartNs,
           r.pos AS pos, r.grp AS grp, r.phase AS phase, r.stage AS stage, r.factor AS factor,
           c.SpanAttributes[r.start_key] AS RawDur,
           if(r.end_key IS NULL OR NOT mapContains(c.SpanAttributes, assumeNotNull(r.end_key)), NULL,
              c.SpanAttributes[assumeNotNull(r.end_key)]) AS RawEnd
    FROM phase_candidates AS c
    JOIN rules_by_name AS n ON n.SpanName = c.SpanName
    JOIN phase_rules_given AS r ON r.pos = n.pos
    WHERE r.source = 'attribute' AND mapContains(c.SpanAttributes, r.start_key)
),
attribute_values AS (
    SELECT *,
           if(factor IS NOT NULL, toFloat64OrNull(trimBoth(RawDur)) * factor,
              toFloat64OrNull(regexpExtract(RawDur, '^\\s*([0-9.eE+-]+)\\s*([a-zµμ]+)\\s*$', 1))
              * transform(regexpExtract(RawDur, '^\\s*([0-9.eE+-]+)\\s*([a-zµμ]+)\\s*$', 2),
                          ['ns', 'us', 'µs', 'μs', 'ms', 's', 'm', 'min', 'h'],
                          [1., 1e3, 1e3, 1e3, 1e6, 1e9, 6e10, 6e10, 3.6e12], CAST(NULL AS Nullable(Float64))))
               AS Dur,
           if(RawEnd IS NULL, NULL,
              if(factor IS NOT NULL, toFloat64OrNull(trimBoth(assumeNotNull(RawEnd))) * factor,
                 toFloat64OrNull(regexpExtract(assumeNotNull(RawEnd), '^\\s*([0-9.eE+-]+)\\s*([a-zµμ]+)\\s*$', 1))
                 * transform(regexpExtract(assumeNotNull(RawEnd), '^\\s*([0-9.eE+-]+)\\s*([a-zµμ]+)\\s*$', 2),
                             ['ns', 'us', 'µs', 'μs', 'ms', 's', 'm', 'min', 'h'],
                             [1., 1e3, 1e3, 1e3, 1e6, 1e9, 6e10, 6e10, 3.6e12],
                             CAST(NULL AS Nullable(Float64))))) AS EndOffset
    FROM attribute_raw
),
attribute_phases AS (
    SELECT *, coalesce(sum(assumeNotNull(Dur)) OVER (
                  PARTITION BY CK, grp ORDER BY pos ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0)
              AS Before
    FROM attribute_values
    WHERE Dur > 0
),
attribute_chain AS (
    SELECT CK, grp, greatest(coalesce(max(EndOffset - (Before + Dur)), 0), 0) AS ChainStart
    FROM attribute_phases
    GROUP BY CK, grp
),
attribute_placed AS (
    SELECT a.TraceId AS TraceId, a.SpanId AS SpanId, a.ServiceName AS ServiceName,
           a.ResourceAttributes AS ResourceAttributes, a.pos AS pos, a.phase AS phase, a.stage AS stage,
           toFloat64(assumeNotNull(a.Dur)) AS Dur, a.StartNs + a.Before + c.ChainStart AS A
    FROM attribute_phases AS a
    JOIN attribute_chain AS c ON c.CK = a.CK AND c.grp = a.grp
),
event_own AS (
    SELECT TraceId, SpanId, ParentSpanId, Name, min(T) AS T
    FROM phase_candidates
    ARRAY JOIN EventNames AS Name, EventTimes AS T
    GROUP BY TraceId, SpanId, ParentSpanId, Name
),
event_ends AS (
    SELECT TraceId, SpanId, Name, T FROM event_own
    UNION ALL
    SELECT TraceId, ParentSpanId AS SpanId, Name, T FROM event_own WHERE ParentSpanId != ''
),
event_placed AS (
    SELECT c.TraceId AS TraceId, c.SpanId AS SpanId, c.ServiceName AS ServiceName,
           any(c.ResourceAttributes) AS ResourceAttributes, r.pos AS pos, r.phase AS phase, r.stage AS stage,
           toFloat64(min(e.T) - s.T) AS Dur, toFloat64(s.T) AS A
    FROM phase_candidates AS c
    JOIN rules_by_name AS n ON n.SpanName = c.SpanName
    JOIN phase_rules_given AS r ON r.pos = n.pos
    JOIN event_own AS s ON s.TraceId = c.TraceId AND s.SpanId = c.SpanId AND s.Name = r.start_key
    JOIN event_ends AS e ON e.TraceId = c.TraceId AND e.SpanId = c.SpanId AND e.Name = r.end_key
    WHERE r.source = 'events' AND e.T > s.T
    GROUP BY c.TraceId, c.SpanId, c.ServiceName, r.pos, r.phase, r.stage, s.T
),
placed AS (
    SELECT TraceId, SpanId, ServiceName, ResourceAttributes, pos, phase, stage, Dur, A FROM attribute_placed
    UNION ALL
    SELECT TraceId, SpanId, ServiceName, ResourceAttributes, pos, phase, stage, Dur, A FROM event_placed
),
carrier_children AS (
    SELECT o.TraceId AS TraceId, o.ParentSpanId AS CarrierId, toUnixTimestamp64Nano(o.Timestamp) AS S,
           toUnixTimestamp64Nano(o.Timestamp) + greatest(toInt64(o.Duration), 0) AS E
    FROM {scope} AS o
    LEFT SEMI JOIN phase_candidates AS c ON c.TraceId = o.TraceId AND c.SpanId = o.ParentSpanId
),
child_runs AS (
    SELECT TraceId, CarrierId, S, E,
           max(toNullable(E)) OVER (PARTITION BY TraceId, CarrierId ORDER BY S, E
                                    ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS PrevEnd
    FROM carrier_children
),
gaps AS (
    SELECT TraceId, CarrierId, coalesce(PrevEnd, toInt64(-4611686018427387904)) AS GA, S AS GB
    FROM child_runs
    WHERE S > coalesce(PrevEnd, toInt64(-4611686018427387904))
    UNION ALL
    SELECT TraceId, CarrierId, max(E) AS GA, toInt64(4611686018427387904) AS GB
    FROM carrier_children GROUP BY TraceId, CarrierId
    UNION ALL
    SELECT DISTINCT p.TraceId AS TraceId, p.SpanId AS CarrierId, toInt64(-4611686018427387904) AS GA,
           toInt64(4611686018427387904) AS GB
    FROM placed AS p
    LEFT ANTI JOIN carrier_children AS k ON k.TraceId = p.TraceId AND k.CarrierId = p.SpanId
),
pieces AS (
    SELECT p.TraceId AS TraceId, p.SpanId AS CarrierId, p.ServiceName AS ServiceName,
           p.ResourceAttributes AS ResourceAttributes, p.pos AS pos, p.phase AS phase, p.stage AS stage,
           greatest(p.A, toFloat64(g.GA)) AS PA, least(p.A + p.Dur, toFloat64(g.GB)) AS PB, g.GA AS GA
    FROM placed AS p
    JOIN gaps AS g ON g.TraceId = p.TraceId AND g.CarrierId = p.SpanId
    WHERE least(p.A + p.Dur, toFloat64(g.GB)) > greatest(p.A, toFloat64(g.GA))
)
-- (the carrier's id is CarrierId here: an output alias SpanId would shadow it in ClickHouse)
SELECT TraceId,
       concat(CarrierId, '/phase', toString(pos),
              if(GA = -4611686018427387904, '', concat('.', toString(GA)))) AS SpanId,
       CarrierId AS ParentSpanId, phase AS SpanName, 'Internal' AS SpanKind, ServiceName, ResourceAttributes,
       'Unset' AS StatusCode,
       toInt64(floor(PA + 0.5)) AS StartNs, toInt64(floor(PB - PA + 0.5)) AS Duration,
       CAST(stage AS Nullable(String)) AS AttrStage, CAST(20000 + pos AS Nullable(Int64)) AS RuleNo
FROM pieces
