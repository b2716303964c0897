-- Bound the loader's DuckDB memory so a multi-GB file ingests within ~1 GB of RSS: a file's
-- uncommitted rows are written ahead to the store file (DuckDB's optimistic writes) instead of being
-- held in memory. Measured in bench/RESULTS.md (Ingest).
SET memory_limit = '512MB'
