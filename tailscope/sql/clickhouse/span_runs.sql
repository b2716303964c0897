-- Runs defined as selections of otel_traces (tailscope_runs), sorted.
SELECT RunLabel FROM tailscope_runs FINAL ORDER BY RunLabel
