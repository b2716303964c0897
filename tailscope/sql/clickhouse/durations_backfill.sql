-- A run's span durations from its selection ({scope}, fixed SQL: statements.run_scope), for a
-- store whose runs were derived before tailscope_span_durations existed (span_durations.ensure).
-- Parameters: table (where to), run, the selection's.
INSERT INTO {table:Identifier}
SELECT {run:String}, toString(SpanName), toInt64(Duration), toUnixTimestamp64Nano(Timestamp)
FROM {scope} AS s
