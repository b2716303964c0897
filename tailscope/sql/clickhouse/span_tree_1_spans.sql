-- ClickHouse span tree, step 1 of 5 (tailscope.store.clickhouse.statements.derive_statements; the steps and the
-- differences from DuckDB are described in span_tree.sql): the run's spans with integer keys, the
-- explicit tailscope.stage attribute and the first matching stage rule, plus the phase spans.
-- ClickHouse cannot materialize a CTE inside a recursive WITH, and an inlined CTE is evaluated again
-- at every reference and every step of the walk, so each step lands in a temporary table (Memory,
-- per session: chdb's session or clickhouse-connect's HTTP session).
-- Placeholders (fixed SQL): scope, names, rule_case, phases.
CREATE TEMPORARY TABLE _ts_spans ENGINE = Memory AS
WITH
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
                 {names}
          FROM {scope}) AS t
),
phase_rows AS (
{phases}
)
    SELECT TK, SK, PK, TraceId, SpanId, ParentSpanId, SpanName, SpanKind, Duration, StartNs, EndNs,
           AttrStage, RuleNo
    FROM real_spans
    UNION ALL
    SELECT cityHash64(TraceId), cityHash64(SpanId), cityHash64(ParentSpanId), TraceId, SpanId,
           ParentSpanId, SpanName, SpanKind, Duration, StartNs, StartNs + Duration, AttrStage, RuleNo
    FROM phase_rows
