-- Span-level derivation for a set of traces: request root, effective interval, depth, stage and
-- exclusive time of every span in each trace's request subtree.
-- Placeholders filled by tailscope.query.builders.span_tree_query with fixed SQL (never with values):
--   scope      which otel_traces rows, as a relation (e.g. the run's), used twice
--   names      the distinct-span-name columns of the name regexes (nh1, nh2, ...)
--   rule_case  the CASE giving the first matching stage rule's position (for the paths output over
--              the ah* columns, else with the attribute regexes inline)
--   attr_hits  (paths output) the attribute-regex hit columns ah1, ah2, ... (one per distinct regex)
--   attr_mask  (paths output) those hits as a BIGINT bit mask
--   phases     phase_spans.sql over the same scope (its own placeholders filled the same way)
--   output     the final SELECT over span_rows: span_tree_spans.sql (one row per span, for the Gantt
--              and the mapping) or span_tree_requests.sql (one row per request, for refresh_run:
--              aggregating here saves writing and re-reading a row per span) or span_tree_paths.sql
--              (per request and path signature, for a derive that keeps the rows a stage-rule edit
--              re-maps: rule_remap.py)
-- Lines ending in a [paths] marker are only in the query with the paths output, lines ending in a
-- [plain] marker only in the others (statements.span_tree_variant): the path signatures cost the
-- derive ~25-45 % CPU, paid only where a run keeps its paths.
-- Joins use integer keys: TK = hash(TraceId), SK = hash(SpanId), PK = hash(ParentSpanId) (64-bit;
-- joining on two BIGINTs instead of two 16-32 character strings roughly halves the walk's cost).
-- Steps:
--   phases       phase spans (phase_spans.sql): the phases a span reports about itself (a serving
--                framework's durations or events), as synthetic children with their rule's stage,
--                RuleNo 20000 + the phase rule's position. They are walked like any child span.
--   spans        the scope's spans, with the explicit tailscope.stage attribute and the matching rule,
--                plus the phase spans.
--                Attributes are JSON text (schema.sql); AttrLines is what attribute regexes match.
--                Name regexes run once per distinct SpanName (name_hits), not once per span: a regex
--                over 10 M names costs ~1 s on 2 cores, over the ~20 distinct names nothing.
--   roots        spans whose parent is not in the trace (ParentSpanId '' or a missing parent)
--   trace_root   one per trace: a true root first, then the longest, then the earliest
--   request_root a CLIENT root with a SERVER child hands the request over to that child, and is kept
--                only for its client-observed duration
--   tier_roots   nested SERVER spans with children and no tailscope.stage attribute: the entry of another
--                service whose work is traced (a model server behind a gateway, a feature service).
--                They are mapped like the request root (stage ingress, rule 10002): their own
--                exclusive time (a batch wait, a handler's overhead) is not given to a stage by name
--                but left unattributed, and their unmatched direct children are unattributed too.
--                A leaf SERVER span (an untraced dependency) keeps the rules: all of it is its work,
--                and so does one matched by a rule that names span kind Server (written for such
--                spans: Ray Serve's nested route_to_replica / replica_handle_request SERVER spans).
--   tree         recursive walk down from the request root. Each span's effective interval is its own
--                clipped to its parent's effective interval, so children that outlast their parent
--                are cut and the exclusive times of a request add up to the root's duration exactly.
--                Depth is capped at 64 so a malformed trace (repeated ids) cannot loop.
--   covered      the union of each span's children's effective intervals: a list_reduce over the
--                children sorted by start, carrying the running maximum end, so parallel or
--                overlapping children are counted once. Measured on 1 M child spans (2 cores, under
--                load): list_sort(list(struct)) + list_reduce 0.66 s, window PARTITION BY parent
--                1.72 s, ordered aggregate list(... ORDER BY) 3.15 s, sibling self-join 0.79 s.
--                ExclusiveNs = effective duration - that union: the span's self time.
--   concurrent   traces whose self times add up to more than the root's duration, i.e. whose
--                parallel branches overlap. Only these take the sweep below.
--   self_intervals the gaps of each span not covered by a child: where the span itself is "leaf-active".
--   shared       the sweep: each elementary segment of time is split evenly between the spans that are
--                leaf-active in it. AttributedNs = the span's share, equal to ExclusiveNs in traces
--                without parallel branches. Attributed times of a request add up to the root's
--                duration exactly (up to float rounding, which derive_requests gives to unattributed).
WITH RECURSIVE
names AS MATERIALIZED (
    SELECT DISTINCT SpanName FROM (SELECT * FROM otel_traces WHERE RunLabel = ?)
),
name_hits AS MATERIALIZED (
    SELECT SpanName, regexp_matches(SpanName, ?, 'i') AS nh1 FROM names
),
real_spans AS (
    SELECT
        hash(t.TraceId) AS TK, hash(t.SpanId) AS SK, hash(t.ParentSpanId) AS PK,
        t.TraceId, t.SpanId, t.ParentSpanId, t.SpanName, t.SpanKind, t.ServiceName, t.StatusCode,
        t.Duration,
        epoch_ns(t.Timestamp) AS StartNs,
        epoch_ns(t.Timestamp) + greatest(t.Duration, 0) AS EndNs,
        CASE WHEN t.RawStage IN ('ingress', 'queue', 'parsing', 'feature_hydration', 'preprocessing',
                                 'model_forward', 'postprocessing', 'downstream', 'serialization',
                                 'unattributed')
             THEN t.RawStage END AS AttrStage,
        CASE WHEN t.RawStage IN ('ingress', 'queue', 'parsing', 'feature_hydration', 'preprocessing',
                                 'model_forward', 'postprocessing', 'downstream', 'serialization',
                                 'unattributed')
             THEN -1 ELSE CASE WHEN SpanKind = ? THEN 1 WHEN nh1 THEN 2 WHEN SpanKind = ? AND ah1 THEN 3 END END AS RuleNo,
        -- which of the rules' attribute regexes match (bit k-1: the k-th distinct one; NULL where the
        -- rules are not tried): part of the span's path signature (rule_remap.py)
        CASE WHEN t.AttrLines IS NOT NULL THEN CAST((CAST(t.ah1 AS BIGINT) << 0) AS BIGINT) END AS AttrMask
    FROM (SELECT *, regexp_matches(AttrLines, ?, 'i') AS ah1 FROM (SELECT *,
                 -- the attributes as "key=value" lines for the rules' attribute regexes: the JSON
                 -- object's '","' and '":"' separators (never inside an escaped string) become a
                 -- newline and '='; values keep their JSON escapes (\" \\ \n). Only for the spans
                 -- the rules are tried on (no valid tailscope.stage attribute)
                 CASE WHEN RawStage IN ('ingress', 'queue', 'parsing', 'feature_hydration', 'preprocessing',
                                        'model_forward', 'postprocessing', 'downstream', 'serialization',
                                        'unattributed') THEN NULL
                      ELSE replace(replace(SpanAttributes[3:-3], '","', chr(10)), '":"', '=') END AS AttrLines
          FROM (SELECT *, SpanAttributes->>'tailscope.stage' AS RawStage FROM (SELECT * FROM otel_traces WHERE RunLabel = ?)))) AS t
    JOIN name_hits AS h ON h.SpanName = t.SpanName
),
phase_rows AS (
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
    -- phase_spans.sql's candidates: the spans of a scope the phase rules could read, with every attribute
-- the rules read. Placeholders (fixed SQL, statements.phase_candidates):
--   scope       which otel_traces rows, as a relation
--   candidates  an OR of regexes of literal alternatives (keys and event names are bound parameters):
--               only spans that carry one of the rules' attribute keys or event names are looked at,
--               so a run without framework phases pays one scan
-- Bound parameters: the JSON paths of every attribute the rules read, the scope's, the candidate
-- filter's.
SELECT TraceId, SpanId, hash(TraceId, SpanId) AS CK, ParentSpanId, SpanName, ServiceName,
       ResourceAttributes, SpanAttributes, Events, epoch_ns(Timestamp) AS StartNs,
       -- every attribute the rules read, with one parse of the span's attributes
       json_extract_string(SpanAttributes, ?::VARCHAR[]) AS RuleValues
FROM (SELECT * FROM otel_traces WHERE RunLabel = ?)
WHERE regexp_matches(SpanAttributes, ?)

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
    FROM (SELECT * FROM otel_traces WHERE RunLabel = ?) AS o
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

),
spans AS MATERIALIZED (
    SELECT * FROM real_spans
    UNION ALL BY NAME
    SELECT hash(TraceId) AS TK, hash(SpanId) AS SK, hash(ParentSpanId) AS PK, TraceId, SpanId,
           ParentSpanId, SpanName, SpanKind, ServiceName, StatusCode, Duration, StartNs,
           StartNs + Duration AS EndNs, Stage AS AttrStage, RuleNo, CAST(NULL AS BIGINT) AS AttrMask
    FROM phase_rows
),
roots AS (
    SELECT s.TK, s.SK, s.ParentSpanId, s.SpanKind, s.Duration, s.StartNs, s.SpanId
    FROM spans AS s ANTI JOIN spans AS p ON p.TK = s.TK AND p.SK = s.PK
),
trace_root AS (
    SELECT * FROM roots
    QUALIFY row_number() OVER (
        PARTITION BY TK ORDER BY (ParentSpanId = '') DESC, Duration DESC, StartNs, SpanId) = 1
),
server_child AS (
    SELECT c.TK, c.SK
    FROM trace_root AS r JOIN spans AS c ON c.TK = r.TK AND c.PK = r.SK
    WHERE r.SpanKind = 'Client' AND c.SpanKind = 'Server'
    QUALIFY row_number() OVER (PARTITION BY c.TK ORDER BY c.Duration DESC, c.StartNs, c.SpanId) = 1
),
-- (materialized, and span_rows inlined: with the requests output's SpanTimes branch reading span_rows
-- a second time DuckDB otherwise copied span_rows and built its root join the wrong way round, +12-14 %
-- CPU at 0.5 M spans against +6 % so)
request_root AS MATERIALIZED (
    SELECT r.TK,
           coalesce(sc.SK, r.SK) AS RootSK,
           CASE WHEN sc.SK IS NOT NULL THEN r.SpanId END AS ClientSpanId,
           CASE WHEN sc.SK IS NOT NULL THEN r.Duration END AS ClientDuration
    FROM trace_root AS r LEFT JOIN server_child AS sc ON sc.TK = r.TK
),
-- (with the paths output every SERVER span with children and no tailscope.stage attribute, Tier:
-- whether the rules make it a tier root; the others are part of a path's signature)
tier_roots AS MATERIALIZED (
    SELECT s.TK, s.SK, NOT list_contains(?::INTEGER[], coalesce(s.RuleNo, 0)) AS Tier
    FROM spans AS s SEMI JOIN spans AS c ON c.TK = s.TK AND c.PK = s.SK
    WHERE s.SpanKind = 'Server' AND s.AttrStage IS NULL
      -- a rule written for SERVER spans (span kind Server) is meant for them: it wins
),
-- (paths output) Sig: the span's path signature, a hash of what its stage depends on under any stage
-- rules (its name, kind, tailscope.stage or phase rule, attribute-regex hits and whether it is a
-- SERVER span with children) and of its parent's signature; PSig its parent's. The root's carries
-- the attribute regexes the hits were taken against (a digest parameter).
tree(TK, SK, PK, EffStart, EffEnd, PStart, Depth, Stage, RuleNo, Sig, PSig) AS (
    SELECT s.TK, s.SK, s.PK, s.StartNs, s.EndNs, s.StartNs, 0,
           coalesce(s.AttrStage, 'ingress'),
           CASE WHEN s.AttrStage IS NOT NULL THEN -1 ELSE 0 END,
           hash(s.SpanName, s.SpanKind, s.AttrStage, s.AttrMask, ?::UBIGINT), CAST(NULL AS UBIGINT)
    FROM spans AS s JOIN request_root AS r ON s.TK = r.TK AND s.SK = r.RootSK
    UNION ALL
    SELECT c.TK, c.SK, c.PK,
           least(greatest(c.StartNs, t.EffStart), t.EffEnd),
           greatest(least(greatest(c.StartNs, t.EffStart), t.EffEnd), least(c.EndNs, t.EffEnd)),
           t.EffStart,
           t.Depth + 1,
           CASE WHEN c.RuleNo = -1 OR c.RuleNo >= 20000 THEN c.AttrStage
                WHEN tr.Tier THEN 'ingress'
                WHEN c.RuleNo IS NOT NULL THEN list_extract(?::VARCHAR[], c.RuleNo)
                WHEN t.Depth = 0 OR t.RuleNo = 10002 THEN 'unattributed'
                ELSE t.Stage END,
           CASE WHEN c.RuleNo = -1 OR c.RuleNo >= 20000 THEN c.RuleNo
                WHEN tr.Tier THEN 10002
                WHEN c.RuleNo IS NOT NULL THEN c.RuleNo
                WHEN t.Depth = 0 OR t.RuleNo = 10002 THEN 10001
                ELSE 10000 END,
           hash(t.Sig, c.SpanName, c.SpanKind, c.AttrStage,
                CASE WHEN c.RuleNo = -1 OR c.RuleNo >= 20000 THEN c.RuleNo END, c.AttrMask, tr.SK IS NOT NULL),
           t.Sig
    FROM tree AS t JOIN spans AS c ON c.TK = t.TK AND c.PK = t.SK
    LEFT JOIN tier_roots AS tr ON tr.TK = c.TK AND tr.SK = c.SK
    WHERE t.Depth < 64
),
walked AS MATERIALIZED (
    SELECT * FROM tree
),
covered AS (
    SELECT TK, PK AS SK,
           -- acc = {s: running max end - covered so far, e: running max end}: covered = e - s
           list_reduce(
               list_sort(list({'s': EffStart, 'e': EffEnd})),
               lambda acc, x: {'s': greatest(acc.e, x.e)
                                    - ((acc.e - acc.s) + greatest(0, x.e - greatest(x.s, acc.e))),
                               'e': greatest(acc.e, x.e)}) AS U,
           max(EffEnd) AS LastEnd
    FROM walked
    WHERE Depth > 0
    GROUP BY TK, PK
),
exclusive AS MATERIALIZED (
    SELECT w.*, (w.EffEnd - w.EffStart) - coalesce(c.U.e - c.U.s, 0) AS ExclusiveNs, c.LastEnd
    FROM walked AS w LEFT JOIN covered AS c ON c.TK = w.TK AND c.SK = w.SK
),
concurrent AS MATERIALIZED (
    SELECT TK
    FROM exclusive
    GROUP BY TK
    HAVING sum(ExclusiveNs) > any_value(EffEnd - EffStart) FILTER (WHERE Depth = 0)
),
children AS (
    SELECT TK, PK, EffStart, EffEnd, PStart,
           max(EffEnd) OVER (
               PARTITION BY TK, PK ORDER BY EffStart, EffEnd
               ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS PrevEnd
    FROM exclusive SEMI JOIN concurrent USING (TK)
    WHERE Depth > 0
),
self_intervals AS MATERIALIZED (
    SELECT TK, PK AS SK, greatest(coalesce(PrevEnd, PStart), PStart) AS A, EffStart AS B
    FROM children
    WHERE EffStart > greatest(coalesce(PrevEnd, PStart), PStart)
    UNION ALL
    SELECT e.TK, e.SK, greatest(coalesce(e.LastEnd, e.EffStart), e.EffStart) AS A, e.EffEnd AS B
    FROM exclusive AS e SEMI JOIN concurrent USING (TK)
    WHERE e.EffEnd > greatest(coalesce(e.LastEnd, e.EffStart), e.EffStart)
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
           lead(T) OVER (PARTITION BY TK ORDER BY T) AS S1,
           sum(D) OVER (PARTITION BY TK ORDER BY T ROWS UNBOUNDED PRECEDING) AS Active
    FROM steps
),
shared AS (
    SELECT i.TK, i.SK, sum((least(g.S1, i.B) - greatest(g.S0, i.A)) / g.Active) AS Attributed
    FROM self_intervals AS i
    JOIN segments AS g ON g.TK = i.TK AND g.S0 < i.B AND g.S1 > i.A AND g.Active > 0
    GROUP BY i.TK, i.SK
),
span_rows AS NOT MATERIALIZED (
    SELECT w.TK, w.SK, w.PK, w.EffStart, w.EffEnd, w.Depth, w.Stage, w.RuleNo, w.Sig, w.PSig, w.ExclusiveNs,
           CASE WHEN x.TK IS NULL THEN CAST(w.ExclusiveNs AS DOUBLE)
                ELSE coalesce(sh.Attributed, 0) END AS AttributedNs
    FROM exclusive AS w
    LEFT JOIN concurrent AS x ON x.TK = w.TK
    LEFT JOIN shared AS sh ON sh.TK = w.TK AND sh.SK = w.SK
)
-- span_tree.sql output for the derive (derive.py): three kinds of rows, told apart by Part.
--   'path'    one per (request TK, path signature Sig): Bucket, where the stage rules in force put
--             the path's time ('unattributed' for the root's and tier roots' own time, as
--             span_tree_requests.sql), Ns its attributed time (ns, not rounded), Spans its real spans
--   'node'    one per distinct Sig (duplicates possible where span ids repeat): what the path's stage
--             depends on under any stage rules (rule_remap.py re-maps nodes, not spans), kept in
--             span_paths
--   'request' one per request: the root's ids and start, the client-observed duration, RootNs
, path_rows AS (
    SELECT 'path' AS Part, TK, Sig,
           any_value(CASE WHEN Depth = 0 OR RuleNo = 10002 THEN 'unattributed' ELSE Stage END) AS Bucket,
           sum(AttributedNs) AS Ns,
           count(*) FILTER (WHERE RuleNo < 20000) AS Spans  -- phase spans are not spans
    FROM span_rows
    GROUP BY TK, Sig
),
node_rows AS (
    SELECT 'node' AS Part, n.Sig, n.PSig, n.Depth = 0 AS IsRoot, s.SpanName, s.SpanKind, s.AttrStage,
           CASE WHEN s.RuleNo = -1 OR s.RuleNo >= 20000 THEN s.RuleNo END AS FixedRule,
           s.AttrMask, tr.SK IS NOT NULL AS ServerParent
    FROM (SELECT Sig, any_value(PSig) AS PSig, min(Depth) AS Depth,
                 any_value({'tk': TK, 'sk': SK, 'pk': PK}) AS R
          FROM exclusive GROUP BY Sig) AS n
    JOIN spans AS s ON s.TK = n.R.tk AND s.SK = n.R.sk AND s.PK = n.R.pk
    LEFT JOIN tier_roots AS tr ON tr.TK = s.TK AND tr.SK = s.SK
)
SELECT * FROM path_rows
UNION ALL BY NAME
SELECT * FROM node_rows
UNION ALL BY NAME
SELECT 'request' AS Part, r.TK, s.TraceId, s.SpanId, r.ClientDuration, s.StartNs, s.EndNs - s.StartNs AS RootNs
FROM request_root AS r
JOIN spans AS s ON s.TK = r.TK AND s.SK = r.RootSK
-- params: ["r1", "forward", "Consumer", "Client", "(?m)^http\\.", "r1", ["$.\"fw.queue_time\""], "r1", "\"fw\\.queue_time\":", [{"pos": 1, "grp": "fw", "phase": "queue", "stage": "queue", "source": "attribute", "start_key": "fw.queue_time", "end_key": null, "factor": 1000000.0, "name_regex": null, "start_at": 1, "end_at": null}], "r1", [], 7721236210711049765, ["queue", "model_forward", "downstream"]]
