-- The traces a refresh derives (_ts_scope), kept for histogram.around_refresh after the derive drops
-- _ts_scope: their new requests' rows are added to the run's histogram once written.
CREATE OR REPLACE TEMP TABLE _ts_histogram_scope AS SELECT TraceId FROM _ts_scope
