-- The selections of the runs with derived rows (span_durations.ensure fills their span durations).
SELECT RunLabel, StartNs, EndNs, Filters FROM tailscope_runs FINAL
WHERE RunLabel IN (SELECT RunLabel FROM tailscope_requests)
ORDER BY RunLabel
