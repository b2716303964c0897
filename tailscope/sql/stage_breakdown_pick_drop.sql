-- Drop the stage breakdown's picked requests (stage_breakdown_pick.sql).
DROP TABLE IF EXISTS temp._ts_span_times
