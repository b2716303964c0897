-- Back to DuckDB's default memory limit (see ingest_writer_memory.sql).
RESET memory_limit
