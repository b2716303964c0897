-- Tail vs body of a whole run from its histogram: the requests at or above the tail threshold, their
-- count, weight and weighted sums of Duration and of each stage (ALL_STAGES order); the rest are the
-- run's totals (request_histogram) less these. Params: run, threshold (ns).
SELECT count(*) AS requests, sum(Weight) AS weight, sum(Weight * Duration) AS duration_ns,
       sum(Weight * COLUMNS('_ns$'))
FROM requests
WHERE RunLabel = ? AND Duration >= ?
