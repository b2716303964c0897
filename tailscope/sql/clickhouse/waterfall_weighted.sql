-- waterfall.sql for requests that stand for others (tailscope_requests.Weight), as
-- ../waterfall_weighted.sql: the bounds given are weighted quantiles (weighted_quantiles.sql,
-- views.quantile_values), counts sums of weights (rounded), means weighted means sum(w·x) / sum(w).
-- Params after the filter's: p1..p4 = q(0.45), q(0.55), q(lo), q(hi) (Float64), p5 = last_band.
-- Band membership (window_fill, marked) is waterfall_marked.sql, shared with waterfall.sql.
WITH f AS (
    SELECT * FROM tailscope_requests WHERE {where}
),
{include:waterfall_marked}
SELECT
    toInt64(round(sum(Weight))) AS n,
    toInt64(round(sumIf(Weight, in_band))) AS band_n,
    toInt64(round(sumIf(Weight, in_median))) AS median_n,
    {p3:Float64} AS q_lo,
    {p4:Float64} AS q_hi,
    sumIf(Weight * Duration, in_band) / nullIf(sumIf(Weight, in_band), 0) AS band_mean,
    sumIf(Weight * Duration, in_median) / nullIf(sumIf(Weight, in_median), 0) AS median_mean,
    sumIf(Weight * ingress_ns, in_band) / nullIf(sumIf(Weight, in_band), 0) AS band_ingress_ns,
    sumIf(Weight * queue_ns, in_band) / nullIf(sumIf(Weight, in_band), 0) AS band_queue_ns,
    sumIf(Weight * parsing_ns, in_band) / nullIf(sumIf(Weight, in_band), 0) AS band_parsing_ns,
    sumIf(Weight * feature_hydration_ns, in_band) / nullIf(sumIf(Weight, in_band), 0) AS band_feature_hydration_ns,
    sumIf(Weight * preprocessing_ns, in_band) / nullIf(sumIf(Weight, in_band), 0) AS band_preprocessing_ns,
    sumIf(Weight * model_forward_ns, in_band) / nullIf(sumIf(Weight, in_band), 0) AS band_model_forward_ns,
    sumIf(Weight * postprocessing_ns, in_band) / nullIf(sumIf(Weight, in_band), 0) AS band_postprocessing_ns,
    sumIf(Weight * downstream_ns, in_band) / nullIf(sumIf(Weight, in_band), 0) AS band_downstream_ns,
    sumIf(Weight * serialization_ns, in_band) / nullIf(sumIf(Weight, in_band), 0) AS band_serialization_ns,
    sumIf(Weight * unattributed_ns, in_band) / nullIf(sumIf(Weight, in_band), 0) AS band_unattributed_ns,
    sumIf(Weight * ingress_ns, in_median) / nullIf(sumIf(Weight, in_median), 0) AS median_ingress_ns,
    sumIf(Weight * queue_ns, in_median) / nullIf(sumIf(Weight, in_median), 0) AS median_queue_ns,
    sumIf(Weight * parsing_ns, in_median) / nullIf(sumIf(Weight, in_median), 0) AS median_parsing_ns,
    sumIf(Weight * feature_hydration_ns, in_median) / nullIf(sumIf(Weight, in_median), 0) AS median_feature_hydration_ns,
    sumIf(Weight * preprocessing_ns, in_median) / nullIf(sumIf(Weight, in_median), 0) AS median_preprocessing_ns,
    sumIf(Weight * model_forward_ns, in_median) / nullIf(sumIf(Weight, in_median), 0) AS median_model_forward_ns,
    sumIf(Weight * postprocessing_ns, in_median) / nullIf(sumIf(Weight, in_median), 0) AS median_postprocessing_ns,
    sumIf(Weight * downstream_ns, in_median) / nullIf(sumIf(Weight, in_median), 0) AS median_downstream_ns,
    sumIf(Weight * serialization_ns, in_median) / nullIf(sumIf(Weight, in_median), 0) AS median_serialization_ns,
    sumIf(Weight * unattributed_ns, in_median) / nullIf(sumIf(Weight, in_median), 0) AS median_unattributed_ns
FROM marked
