-- Bound DuckDB's memory while the loader appends a file's spans, so a multi-GB file ingests in
-- bounded RSS (uncommitted row groups are written ahead to the store file). Undone by
-- ingest_writer_memory_reset.sql before the derived tables are rebuilt, which need more for large
-- runs. Measured in bench/RESULTS.md (Ingest).
SET memory_limit = '256MB'
