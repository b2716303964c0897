-- What changes when the store's data does (the dashboard caches results per value): counts of the
-- spans, the runs, the derived requests and the stage rules (count() of a MergeTree: its metadata).
SELECT (SELECT count() FROM otel_traces), (SELECT count() FROM tailscope_runs),
       (SELECT count() FROM tailscope_requests), (SELECT count() FROM tailscope_stage_rules)
