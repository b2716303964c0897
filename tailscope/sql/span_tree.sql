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
    SELECT DISTINCT SpanName FROM {scope}
),
name_hits AS MATERIALIZED (
    SELECT {names} FROM names
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
             THEN -1 ELSE {rule_case} END AS RuleNo  --[plain]
             THEN -1 ELSE {rule_case} END AS RuleNo,  --[paths]
        -- which of the rules' attribute regexes match (bit k-1: the k-th distinct one; NULL where the  --[paths]
        -- rules are not tried): part of the span's path signature (rule_remap.py)  --[paths]
        {attr_mask} AS AttrMask  --[paths]
    FROM (SELECT *{attr_hits} FROM (SELECT *,  --[paths]
    FROM (SELECT *,  --[plain]
                 -- the attributes as "key=value" lines for the rules' attribute regexes: the JSON
                 -- object's '","' and '":"' separators (never inside an escaped string) become a
                 -- newline and '='; values keep their JSON escapes (\" \\ \n). Only for the spans
                 -- the rules are tried on (no valid tailscope.stage attribute)
                 CASE WHEN RawStage IN ('ingress', 'queue', 'parsing', 'feature_hydration', 'preprocessing',
                                        'model_forward', 'postprocessing', 'downstream', 'serialization',
                                        'unattributed') THEN NULL
                      ELSE replace(replace(SpanAttributes[3:-3], '","', chr(10)), '":"', '=') END AS AttrLines
          FROM (SELECT *, SpanAttributes->>'tailscope.stage' AS RawStage FROM {scope}))) AS t  --[paths]
          FROM (SELECT *, SpanAttributes->>'tailscope.stage' AS RawStage FROM {scope})) AS t  --[plain]
    JOIN name_hits AS h ON h.SpanName = t.SpanName
),
phase_rows AS (
{phases}
),
spans AS MATERIALIZED (
    SELECT * FROM real_spans
    UNION ALL BY NAME
    SELECT hash(TraceId) AS TK, hash(SpanId) AS SK, hash(ParentSpanId) AS PK, TraceId, SpanId,
           ParentSpanId, SpanName, SpanKind, ServiceName, StatusCode, Duration, StartNs,
           StartNs + Duration AS EndNs, Stage AS AttrStage, RuleNo  --[plain]
           StartNs + Duration AS EndNs, Stage AS AttrStage, RuleNo, CAST(NULL AS BIGINT) AS AttrMask  --[paths]
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
    SELECT s.TK, s.SK  --[plain]
    SELECT s.TK, s.SK, NOT list_contains(?::INTEGER[], coalesce(s.RuleNo, 0)) AS Tier  --[paths]
    FROM spans AS s SEMI JOIN spans AS c ON c.TK = s.TK AND c.PK = s.SK
    WHERE s.SpanKind = 'Server' AND s.AttrStage IS NULL
      -- a rule written for SERVER spans (span kind Server) is meant for them: it wins
      AND NOT list_contains(?::INTEGER[], coalesce(s.RuleNo, 0))  --[plain]
),
-- (paths output) Sig: the span's path signature, a hash of what its stage depends on under any stage
-- rules (its name, kind, tailscope.stage or phase rule, attribute-regex hits and whether it is a
-- SERVER span with children) and of its parent's signature; PSig its parent's. The root's carries
-- the attribute regexes the hits were taken against (a digest parameter).
tree(TK, SK, PK, EffStart, EffEnd, PStart, Depth, Stage, RuleNo) AS (  --[plain]
tree(TK, SK, PK, EffStart, EffEnd, PStart, Depth, Stage, RuleNo, Sig, PSig) AS (  --[paths]
    SELECT s.TK, s.SK, s.PK, s.StartNs, s.EndNs, s.StartNs, 0,
           coalesce(s.AttrStage, 'ingress'),
           CASE WHEN s.AttrStage IS NOT NULL THEN -1 ELSE 0 END  --[plain]
           CASE WHEN s.AttrStage IS NOT NULL THEN -1 ELSE 0 END,  --[paths]
           hash(s.SpanName, s.SpanKind, s.AttrStage, s.AttrMask, ?::UBIGINT), CAST(NULL AS UBIGINT)  --[paths]
    FROM spans AS s JOIN request_root AS r ON s.TK = r.TK AND s.SK = r.RootSK
    UNION ALL
    SELECT c.TK, c.SK, c.PK,
           least(greatest(c.StartNs, t.EffStart), t.EffEnd),
           greatest(least(greatest(c.StartNs, t.EffStart), t.EffEnd), least(c.EndNs, t.EffEnd)),
           t.EffStart,
           t.Depth + 1,
           CASE WHEN c.RuleNo = -1 OR c.RuleNo >= 20000 THEN c.AttrStage
                WHEN tr.SK IS NOT NULL THEN 'ingress'  --[plain]
                WHEN tr.Tier THEN 'ingress'  --[paths]
                WHEN c.RuleNo IS NOT NULL THEN list_extract(?::VARCHAR[], c.RuleNo)
                WHEN t.Depth = 0 OR t.RuleNo = 10002 THEN 'unattributed'
                ELSE t.Stage END,
           CASE WHEN c.RuleNo = -1 OR c.RuleNo >= 20000 THEN c.RuleNo
                WHEN tr.SK IS NOT NULL THEN 10002  --[plain]
                WHEN tr.Tier THEN 10002  --[paths]
                WHEN c.RuleNo IS NOT NULL THEN c.RuleNo
                WHEN t.Depth = 0 OR t.RuleNo = 10002 THEN 10001
                ELSE 10000 END  --[plain]
                ELSE 10000 END,  --[paths]
           hash(t.Sig, c.SpanName, c.SpanKind, c.AttrStage,  --[paths]
                CASE WHEN c.RuleNo = -1 OR c.RuleNo >= 20000 THEN c.RuleNo END, c.AttrMask, tr.SK IS NOT NULL),  --[paths]
           t.Sig  --[paths]
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
    SELECT w.TK, w.SK, w.PK, w.EffStart, w.EffEnd, w.Depth, w.Stage, w.RuleNo, w.ExclusiveNs,  --[plain]
    SELECT w.TK, w.SK, w.PK, w.EffStart, w.EffEnd, w.Depth, w.Stage, w.RuleNo, w.Sig, w.PSig, w.ExclusiveNs,  --[paths]
           CASE WHEN x.TK IS NULL THEN CAST(w.ExclusiveNs AS DOUBLE)
                ELSE coalesce(sh.Attributed, 0) END AS AttributedNs
    FROM exclusive AS w
    LEFT JOIN concurrent AS x ON x.TK = w.TK
    LEFT JOIN shared AS sh ON sh.TK = w.TK AND sh.SK = w.SK
)
{output}
