-- Create or refresh a run's row: counts come from the stored spans, so they stay true however many
-- files the run was loaded from. $1: run label, $2: source files, $3: setup attribute keys,
-- $4: their values.
INSERT OR REPLACE INTO runs (RunLabel, SourceFiles, LoadedAt, SpanCount, TraceCount, SetupAttributes)
SELECT $1, $2::VARCHAR[], now()::TIMESTAMP, count(*), count(DISTINCT TraceId), map($3::VARCHAR[], $4::VARCHAR[])
FROM otel_traces
WHERE RunLabel = $1
