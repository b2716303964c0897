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
FROM {scope}
WHERE {candidates}
