-- How many of the traces a write touched the run already had: those with a derived request (every
-- stored trace has one, unless its spans form a cycle), looked for where their roots can start
-- (derive.trace_window), before the write's refresh replaces those rows. Reads the Arrow table
-- registered as ingest_touched. $1: run label, $2/$3: the window in ns.
SELECT count(*)
FROM requests
WHERE RunLabel = $1
  AND Timestamp BETWEEN make_timestamp_ns($2::BIGINT) AND make_timestamp_ns($3::BIGINT)
  AND TraceId IN (SELECT TraceId FROM ingest_touched)
