-- Bound DuckDB's memory for a file's whole transaction, so a multi-GB file ingests in bounded RSS:
-- its buffers spill to the store file, and the derived rows are rebuilt part by part
-- (tailscope.store.duckdb.derive.PART_SPANS) under the same cap. The transaction-local storage of the
-- appended rows is not held to it (measured: ~0.3 GiB per million spans while appending).
-- Measured in bench/RESULTS.md (Ingest).
SET memory_limit = '512MB'
