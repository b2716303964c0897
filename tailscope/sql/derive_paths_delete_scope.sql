-- Drop the kept path rows of the traces being recomputed (derive_delete_scope.sql's, same params:
-- run, then the window in ns their roots start in).
DELETE FROM request_paths
WHERE RunLabel = ?
  AND StartNs BETWEEN ? AND ?
  AND TK IN (SELECT hash(TraceId) FROM _ts_scope)
