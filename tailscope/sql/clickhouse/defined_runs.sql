-- Every run's label (tailscope_runs: a run is a selection), in order.
SELECT RunLabel FROM tailscope_runs FINAL ORDER BY RunLabel
