-- Diagnosis: how large a run is and when it runs (spans, first and last span start in ns), as
-- ../diagnosis_extent.sql. {scope}: the run's selection (narrowed to a window where one is given).
SELECT count() AS Spans, min(toUnixTimestamp64Nano(Timestamp)) AS FirstNs,
       max(toUnixTimestamp64Nano(Timestamp)) AS LastNs
FROM {scope}
