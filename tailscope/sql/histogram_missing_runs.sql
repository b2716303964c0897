-- Runs with derived requests but no pre-aggregates (a store derived before request_histogram, or
-- before heatmap_histogram, existed).
SELECT DISTINCT RunLabel FROM requests
WHERE RunLabel NOT IN (SELECT RunLabel FROM request_histogram)
   OR RunLabel NOT IN (SELECT RunLabel FROM heatmap_histogram)
ORDER BY RunLabel
