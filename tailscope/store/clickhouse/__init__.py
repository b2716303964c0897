"""The ClickHouse engine: the OTel Collector exporter's otel_traces on a server or in chdb (client and
transports, tables, writer, derive, samples, reads)."""
