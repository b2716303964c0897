-- How many traces a load's converted spans have (ingest_shared_ready_ddl.sql): a new run's count
-- when otel_traces had none of its spans before (overlap.py; run_trace_count.sql reads the
-- written maps back: 1 M spans ~0.7 s, this ~0.1 s).
SELECT uniqExact(TraceId) FROM {ready:Identifier}
