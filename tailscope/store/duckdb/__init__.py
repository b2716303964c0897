"""The DuckDB engine: one store file (connection, schema and migration, writer, derive, reads)."""
