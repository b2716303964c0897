-- Schema version 5 -> 6, in place (tailscope.store.duckdb.migrate, one transaction):
-- requests.SpanStarts, the distinct start times of each request's spans, where tail vs body finds a
-- sampled trace's spans (schema.sql). NULL in every existing row, nothing is recomputed: a run's next
-- derive fills it, and until then tail vs body finds those requests' spans by their TraceId, as before.
ALTER TABLE requests ADD COLUMN IF NOT EXISTS SpanStarts BIGINT[];
UPDATE schema_version SET version = 6;
