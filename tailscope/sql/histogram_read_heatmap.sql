-- One run's heatmap pre-aggregate of one stage ('' for e2e; heatmap_histogram, histogram_schema.sql)
-- summed into time bins of $width whole seconds from $first (histogram_heatmap_extent.sql), for
-- tailscope.analysis.heatmap_histogram: (time bin, bucket, cell at 10 per decade, requests, weight).
-- Params: $run, $stage, $first, $width.
SELECT (Second - $first) // $width AS tb, Bucket, Cell, sum(Requests) AS Requests, sum(Weight) AS Weight
FROM heatmap_histogram
WHERE RunLabel = $run AND Stage = $stage
GROUP BY ALL
