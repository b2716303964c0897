-- The span tree's temporary tables (span_tree_1_spans.sql ... span_tree_5_exclusive.sql), dropped
-- before a derive and after it.
DROP TEMPORARY TABLE IF EXISTS _ts_spans, _ts_request_root, _ts_tier_roots, _ts_walked, _ts_exclusive
