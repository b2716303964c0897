-- The longest request (server or client-observed duration, ns) among a run's requests whose root
-- starts in a window: those an incremental derive wrote (derive.refresh_run keeps the run's longest
-- in derive_state from it). Params: run, window start, window end (ns).
SELECT max(greatest(Duration, coalesce(ClientDuration, 0))) FROM requests
WHERE RunLabel = ?
  AND Timestamp BETWEEN make_timestamp_ns(?::BIGINT) AND make_timestamp_ns(?::BIGINT)
