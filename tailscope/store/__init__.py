"""The store: one interface (interface.Store), two engines (duckdb/, clickhouse/), chosen once by
engine.open_store from a store URL. See ARCHITECTURE.md, "Store"."""
