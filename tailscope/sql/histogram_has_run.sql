-- Whether a run has rows in request_histogram and in heatmap_histogram (a run with requests has
-- some in both once built; a store derived before heatmap_histogram existed has none there). Param: run.
SELECT (SELECT count(*) > 0 FROM request_histogram WHERE RunLabel = $run)
   AND (SELECT count(*) > 0 FROM heatmap_histogram WHERE RunLabel = $run)
