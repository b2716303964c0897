-- Runs that have requests (derived rows), sorted.
SELECT DISTINCT RunLabel FROM tailscope_requests ORDER BY RunLabel
