-- The requests of the traces a refresh derives (_ts_histogram_scope, histogram_scope.sql) whose roots
-- start in its window, as derive_delete_scope.sql deletes them: copied before the delete (the rows
-- taken away from the run's histograms) and after the derive (the rows added). Params: $run, $low,
-- $high (ns).
CREATE OR REPLACE TEMP TABLE _ts_histogram_rows AS
SELECT * FROM requests
WHERE RunLabel = $run
  AND Timestamp BETWEEN make_timestamp_ns($low::BIGINT) AND make_timestamp_ns($high::BIGINT)
  AND TraceId IN (SELECT TraceId FROM temp._ts_histogram_scope)
