-- Tail vs body, per stage, as ../tail_stages_weighted.sql: weighted mean time of the selected requests
-- vs the rest, counts as sums of weights (rounded); the threshold given is a weighted quantile.
-- Params: the filter's, then tail_selection.sql's.
{include:tail_selection}
SELECT toBool(selected) AS selected, toInt64(round(sum(Weight))) AS n, sum(Weight * Duration) / sum(Weight) AS mean_ns,
       sum(Weight * ingress_ns) / sum(Weight), sum(Weight * queue_ns) / sum(Weight), sum(Weight * parsing_ns) / sum(Weight), sum(Weight * feature_hydration_ns) / sum(Weight), sum(Weight * preprocessing_ns) / sum(Weight),
       sum(Weight * model_forward_ns) / sum(Weight), sum(Weight * postprocessing_ns) / sum(Weight), sum(Weight * downstream_ns) / sum(Weight), sum(Weight * serialization_ns) / sum(Weight),
       sum(Weight * unattributed_ns) / sum(Weight)
FROM m
GROUP BY selected
