-- Tail vs body, per stage, as ../tail_stages.sql: mean time of the selected requests vs the rest.
-- Params: the filter's, then tail_selection.sql's.
{include:tail_selection}
SELECT toBool(selected) AS selected, count() AS n, avg(Duration) AS mean_ns,
       avg(ingress_ns), avg(queue_ns), avg(parsing_ns), avg(feature_hydration_ns), avg(preprocessing_ns),
       avg(model_forward_ns), avg(postprocessing_ns), avg(downstream_ns), avg(serialization_ns),
       avg(unattributed_ns)
FROM m
GROUP BY selected
