-- histogram.around_refresh's copies (histogram_scope.sql, histogram_scope_rows.sql), once merged.
DROP TABLE IF EXISTS temp._ts_histogram_scope;
DROP TABLE IF EXISTS temp._ts_histogram_rows
