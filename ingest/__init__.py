"""Ingest: read trace exports (files or OTLP requests), decode them into span batches, store them."""
