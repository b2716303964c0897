-- Create or refresh a run's row. $1: run label, $2: source files, $3: setup attribute keys, $4: their
-- values, $5: the run's span count, $6: its trace count (ingest.loader: exact, or kept up to date per
-- write and recounted exactly whenever the run has grown by a quarter).
INSERT OR REPLACE INTO runs (RunLabel, SourceFiles, LoadedAt, SpanCount, TraceCount, SetupAttributes)
VALUES ($1, $2::VARCHAR[], now()::TIMESTAMP, $5, $6, map($3::VARCHAR[], $4::VARCHAR[]))
