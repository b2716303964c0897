-- One row of a run's recorded stage mapping (kept_mapping.record): run, the run's span count, traces,
-- window first and end ns (NULL: the whole run), the rules' digest, then stage_mapping_summary.sql's
-- row (span name, kind, stage, rule number, spans).
INSERT INTO stage_mapping_kept (RunLabel, SpanRows, Traces, WindowFirst, WindowEnd, Rules,
                                SpanName, SpanKind, Stage, RuleNo, Spans)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
