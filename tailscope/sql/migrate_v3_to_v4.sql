-- Schema version 3 -> 4, in place (tailscope.store.duckdb.migrate, one transaction): requests gains
-- SpanTimes, each request's attributed ns per (stage, span name), which derive_requests.sql now
-- writes and the stage breakdown reads (stage_breakdown_pick.sql). The rows derived before it keep
-- NULL: the breakdown reads their spans, as before, until their run is derived again (a rule edit,
-- a whole-run refresh). Nothing else changes.
ALTER TABLE requests ADD COLUMN SpanTimes STRUCT(stage VARCHAR, span_name VARCHAR, ns DOUBLE)[];
UPDATE schema_version SET version = 4;
