-- Drop the spans new to the run once they moved into otel_traces (or the file failed).
DROP TEMPORARY TABLE IF EXISTS _ts_fresh
