-- Add the signed rows of temp.{delta} (histogram_e2e_rows.sql / histogram_stage_rows.sql over the
-- traces a refresh replaced, then over their new rows) into {table} for the run $run: the touched
-- buckets' rows summed with the delta, written back, empty ones dropped. Reads only {table}'s
-- rows (a few thousand per run), never `requests`: a refresh's cost does not grow with the run.
-- {key}: the table's key columns after RunLabel, {bound}: nothing, or for heatmap_histogram a range of
-- Second ($low_s, $high_s: the refresh's window) that lets the row groups outside it be skipped by
-- their Second range, so the merge does not read the run's other seconds (fixed SQL from histogram.py).
CREATE OR REPLACE TEMP TABLE _ts_histogram_merged AS
SELECT RunLabel, {key}, sum(COLUMNS(* EXCLUDE (RunLabel, {key})))
FROM (
    SELECT * FROM {table} WHERE RunLabel = $run {bound} AND ({key}) IN (SELECT ({key}) FROM temp.{delta})
    UNION ALL BY NAME
    SELECT * FROM temp.{delta}
)
GROUP BY RunLabel, {key};
DELETE FROM {table} WHERE RunLabel = $run {bound} AND ({key}) IN (SELECT ({key}) FROM temp.{delta});
INSERT INTO {table} BY NAME SELECT * FROM temp._ts_histogram_merged WHERE Requests <> 0;
DROP TABLE temp._ts_histogram_merged;
DROP TABLE temp.{delta}
