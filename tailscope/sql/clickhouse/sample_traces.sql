-- Up to {traces} trace ids of a run, chosen by hash (the stage mapping's sample, as DuckDB's
-- stage_mapping_scope.sql). {scope}: the run's selection.
SELECT TraceId FROM {scope} AS t GROUP BY TraceId ORDER BY cityHash64(TraceId) LIMIT {traces:UInt64}
