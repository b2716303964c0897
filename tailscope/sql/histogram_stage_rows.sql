-- Rows of stage_histogram (schema.sql) over {requests} (as histogram_e2e_rows.sql): per stage (the
-- `_ns` columns, unpivoted) and bucket of its exclusive time, count and weight times $sign.
SELECT
    RunLabel,
    substr(Stage, 1, length(Stage) - 3) AS Stage,
    CAST(CASE WHEN v > 0 THEN floor(ln(v) * 100) ELSE -1 END AS INTEGER) AS Bucket,
    $sign * count(*) AS Requests,
    $sign * sum(Weight) AS Weight
FROM (
    UNPIVOT (SELECT RunLabel, Weight, COLUMNS('_ns$') FROM {requests})
    ON COLUMNS('_ns$') INTO NAME Stage VALUE v
)
GROUP BY ALL
