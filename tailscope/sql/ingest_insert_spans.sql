-- Append one decoded batch to a run: `ingest_batch` is the Arrow table of the batch, queried as a
-- relation (ingest.loader.append_batch), with the run label as its last column, RunLabel. The label
-- travels as data because a relation's query takes no parameters; a registered view would, but a
-- view registered inside the file's transaction keeps its Arrow table alive until the commit
-- (measured: the whole file's decoded batches, ~0.35 GiB per million spans). Duplicates are removed
-- afterwards for the whole file at once (dedupe_run.sql), cheaper than an anti-join per batch.
INSERT INTO otel_traces
SELECT Timestamp, TraceId, SpanId, ParentSpanId, TraceState, SpanName, SpanKind, ServiceName,
       ResourceAttributes, ScopeName, ScopeVersion, SpanAttributes, Duration, StatusCode, StatusMessage,
       Events, Links, CAST(RunLabel AS VARCHAR) AS RunLabel
FROM ingest_batch
