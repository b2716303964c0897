-- The spans of one scope (statements.SCOPES: a run, a set of traces in a window, one trace), copied
-- once into a temp table that span_tree.sql and phase_spans.sql then read as their scope: they read
-- it four times (span names, spans, phase candidates, the carriers' children), and each read of a
-- scope joined to otel_traces scans the run's TraceId column (and the phase candidates' substring
-- test its attributes) again. The scope is fixed SQL; its values are bound parameters.
CREATE TEMP TABLE _ts_scope_spans AS SELECT * FROM {scope} AS s
