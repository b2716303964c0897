-- How many of the stage breakdown's sampled requests were found (stage_breakdown_pick.sql), and how
-- many of them have no SpanTimes (derived before the column existed).
SELECT count(*), count(*) FILTER (WHERE SpanTimes IS NULL) FROM _ts_span_times
