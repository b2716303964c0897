-- How far refresh_run has read a run.
SELECT SpanRows, MaxRowid FROM derive_state WHERE RunLabel = ?
