-- Waterfall of one percentile band, as ../waterfall.sql (read its notes), with the quantiles given:
-- ClickHouse has no quantile_cont, so the caller computes q(0.45), q(0.55), q(lo), q(hi) from exact
-- order statistics (order_statistics.sql, tailscope.analysis.quantiles) and passes their values.
-- Params after the filter's: p1..p4 = q(0.45), q(0.55), q(lo), q(hi) (Float64), p5 = last_band.
-- Output: one row, as ../waterfall.sql: n, band_n, median_n, q_lo, q_hi, band_mean, median_mean,
-- band_<stage>... (avg ns), median_<stage>... (avg ns), stages in table order (ALL_STAGES).
-- Band membership (window_fill, marked): waterfall_marked.sql, shared with waterfall_weighted.sql.
WITH f AS (
    SELECT * FROM tailscope_requests WHERE {where}
),
{include:waterfall_marked}
SELECT
    count() AS n,
    countIf(in_band) AS band_n,
    countIf(in_median) AS median_n,
    {p3:Float64} AS q_lo,
    {p4:Float64} AS q_hi,
    avgOrNullIf(Duration, in_band) AS band_mean,
    avgOrNullIf(Duration, in_median) AS median_mean,
    avgOrNullIf(ingress_ns, in_band) AS band_ingress_ns,
    avgOrNullIf(queue_ns, in_band) AS band_queue_ns,
    avgOrNullIf(parsing_ns, in_band) AS band_parsing_ns,
    avgOrNullIf(feature_hydration_ns, in_band) AS band_feature_hydration_ns,
    avgOrNullIf(preprocessing_ns, in_band) AS band_preprocessing_ns,
    avgOrNullIf(model_forward_ns, in_band) AS band_model_forward_ns,
    avgOrNullIf(postprocessing_ns, in_band) AS band_postprocessing_ns,
    avgOrNullIf(downstream_ns, in_band) AS band_downstream_ns,
    avgOrNullIf(serialization_ns, in_band) AS band_serialization_ns,
    avgOrNullIf(unattributed_ns, in_band) AS band_unattributed_ns,
    avgOrNullIf(ingress_ns, in_median) AS median_ingress_ns,
    avgOrNullIf(queue_ns, in_median) AS median_queue_ns,
    avgOrNullIf(parsing_ns, in_median) AS median_parsing_ns,
    avgOrNullIf(feature_hydration_ns, in_median) AS median_feature_hydration_ns,
    avgOrNullIf(preprocessing_ns, in_median) AS median_preprocessing_ns,
    avgOrNullIf(model_forward_ns, in_median) AS median_model_forward_ns,
    avgOrNullIf(postprocessing_ns, in_median) AS median_postprocessing_ns,
    avgOrNullIf(downstream_ns, in_median) AS median_downstream_ns,
    avgOrNullIf(serialization_ns, in_median) AS median_serialization_ns,
    avgOrNullIf(unattributed_ns, in_median) AS median_unattributed_ns
FROM marked
