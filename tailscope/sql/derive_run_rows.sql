-- A run's span count and highest rowid (refresh_run's high-water mark).
SELECT count(*), max(rowid) FROM otel_traces WHERE RunLabel = ?
