-- Diagnosis: the runs in the store (selections of otel_traces in tailscope_runs), sorted.
SELECT RunLabel FROM tailscope_runs FINAL ORDER BY RunLabel
