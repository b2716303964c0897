-- The stage mapping a whole derive recorded for a run (store/duckdb/kept_mapping.py), only where it was
-- computed for this scope (how many traces, the window's first and end ns, or NULL for the whole run)
-- under the rules in force (their digest) and the run still holds the spans it was computed from (as
-- many as then: a write since changes the count). No row: compute it live.
-- Params: run, traces, first, end, rules.
SELECT SpanName, SpanKind, Stage, RuleNo, Spans
FROM stage_mapping_kept
WHERE RunLabel = $run AND Traces = $traces AND WindowFirst IS NOT DISTINCT FROM $first
  AND WindowEnd IS NOT DISTINCT FROM $end AND Rules = $rules
  AND SpanRows = (SELECT count(*) FROM otel_traces WHERE RunLabel = $run)
