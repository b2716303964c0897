-- One run's heatmap pre-aggregate of one stage ('' for e2e; heatmap_histogram, histogram_schema.sql):
-- its first and last second and the requests it counts. Params: $run, $stage.
SELECT min(Second), max(Second), sum(Requests)
FROM heatmap_histogram
WHERE RunLabel = $run AND Stage = $stage
