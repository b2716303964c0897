-- ../histogram_read_e2e.sql on ClickHouse: the run's e2e histogram computed from tailscope_requests
-- as it is read (a column scan ClickHouse does in tens of ms per million requests), the same buckets
-- (floor(100 ln ns), -1 for 0) and sums as DuckDB's derive keeps in request_histogram. Param: run.
SELECT toInt32(if(Duration > 0, floor(log(Duration) * 100), -1)) AS Bucket,
       count() AS Requests, sum(Weight) AS weight_sum, sumIf(Weight, IsError) AS error_weight,
       sum(Weight * Duration) AS DurationNs,
       sum(Weight * ingress_ns), sum(Weight * queue_ns), sum(Weight * parsing_ns),
       sum(Weight * feature_hydration_ns), sum(Weight * preprocessing_ns), sum(Weight * model_forward_ns),
       sum(Weight * postprocessing_ns), sum(Weight * downstream_ns), sum(Weight * serialization_ns),
       sum(Weight * unattributed_ns)
FROM tailscope_requests
WHERE RunLabel = {p1:String}
GROUP BY Bucket
ORDER BY Bucket
