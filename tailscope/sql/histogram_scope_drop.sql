-- histogram.around_refresh's copy of the refreshed traces (histogram_scope.sql), once merged.
DROP TABLE IF EXISTS temp._ts_histogram_scope
