-- ../tail_above_sums.sql on ClickHouse. Params: run, threshold (ns).
SELECT count() AS requests, sum(Weight) AS weight, sum(Weight * Duration) AS duration_ns,
       sum(Weight * ingress_ns), sum(Weight * queue_ns), sum(Weight * parsing_ns),
       sum(Weight * feature_hydration_ns), sum(Weight * preprocessing_ns), sum(Weight * model_forward_ns),
       sum(Weight * postprocessing_ns), sum(Weight * downstream_ns), sum(Weight * serialization_ns),
       sum(Weight * unattributed_ns)
FROM tailscope_requests
WHERE RunLabel = {p1:String} AND Duration >= {p2:Float64}
