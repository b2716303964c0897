-- Rows of heatmap_histogram (histogram_schema.sql) over {requests} (as histogram_e2e_rows.sql): per
-- stage ('' for Duration, else the `_ns` column's stage, unpivoted), second of the request's start,
-- bucket of the value (floor(100 ln ns), -1 for <= 0) and heatmap cell at 10 per decade
-- (heatmap_bins.sql's lb: floor(10 log10(max(ns, 1000) / 1e6))), count and weight times $sign.
-- Ordered by second, so a refresh's merge (histogram_merge.sql) skips the row groups of the run's
-- other seconds.
SELECT
    RunLabel,
    CASE WHEN Stage = 'Duration' THEN '' ELSE substr(Stage, 1, length(Stage) - 3) END AS Stage,
    Second,
    CAST(CASE WHEN v > 0 THEN floor(ln(v) * 100) ELSE -1 END AS INTEGER) AS Bucket,
    CAST(floor(log10(greatest(v, 1000) / 1e6) * 10) AS INTEGER) AS Cell,
    $sign * count(*) AS Requests,
    $sign * sum(Weight) AS Weight
FROM (
    UNPIVOT (
        SELECT RunLabel, Weight, epoch_ns(Timestamp) // 1000000000 AS Second, Duration, COLUMNS('_ns$')
        FROM {requests}
    )
    ON Duration, COLUMNS('_ns$') INTO NAME Stage VALUE v
)
GROUP BY ALL
ORDER BY Second, Stage
