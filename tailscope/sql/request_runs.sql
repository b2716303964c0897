-- Runs that have requests (derived rows), sorted.
SELECT DISTINCT RunLabel FROM requests ORDER BY RunLabel
