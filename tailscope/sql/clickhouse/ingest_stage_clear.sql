-- Empty the staging table after its batch moved into otel_traces.
TRUNCATE TABLE _ts_stage
