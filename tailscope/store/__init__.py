"""The DuckDB store: schema, connections for one writer and many short-lived readers."""
