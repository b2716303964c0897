-- The longest request of a run (server or client-observed duration, ns): how far apart the spans of
-- one of its traces can start (derive.trace_window). Param: run.
SELECT max(greatest(Duration, coalesce(ClientDuration, 0))) FROM requests WHERE RunLabel = ?
