-- A receiver flush's spans new to the run (ingest_fresh_fill.sql's _ts_fresh) as span durations:
-- `collect` derives its run window by window without forgetting them, so they are added as the spans
-- arrive. Parameter: run.
INSERT INTO tailscope_span_durations
SELECT {run:String}, toString(SpanName), toInt64(Duration), toUnixTimestamp64Nano(Timestamp)
FROM _ts_fresh
