-- Empty the spans new to the run after they moved into otel_traces (or the file failed).
TRUNCATE TABLE _ts_fresh
