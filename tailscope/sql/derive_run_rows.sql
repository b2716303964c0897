-- A run's span count (what derive_state records the derived rows as reflecting). Param: run.
SELECT count(*) FROM otel_traces WHERE RunLabel = ?
