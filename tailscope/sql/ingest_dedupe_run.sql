-- Delete the copies ingest_dedupe_copies.sql found (rowids are stable within the transaction).
DELETE FROM otel_traces WHERE rowid IN (SELECT CopyRow FROM temp._ts_copies)
