-- A derive window's span durations (tailscope_span_durations_ddl.sql), from the span tree's first
-- step (span_tree_1_spans.sql's _ts_spans, before it is dropped): the run's own spans (not the phase
-- spans, RuleNo >= 20000) that start in the window [keep_start, keep_end) ns, so the windows of a
-- derive add up to the run. Used as `INSERT INTO <target> <this>` (statements.derive_statements).
-- Parameters: run, keep_start, keep_end.
SELECT {run:String} AS RunLabel, SpanName, Duration, StartNs
FROM _ts_spans
WHERE ifNull(RuleNo, 0) < 20000
  AND StartNs >= {keep_start:Int64} AND StartNs < {keep_end:Int64}
