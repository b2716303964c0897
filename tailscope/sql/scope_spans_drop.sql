-- Drop the staged spans of a scope (scope_spans_stage.sql).
DROP TABLE IF EXISTS temp._ts_scope_spans
