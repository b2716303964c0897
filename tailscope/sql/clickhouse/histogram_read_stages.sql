-- ../histogram_read_stages.sql on ClickHouse: each stage's histogram of the run computed as it is
-- read (as histogram_read_e2e.sql). Param: run.
SELECT Stage, Bucket, count() AS Requests, sum(Weight) AS weight_sum
FROM (
    SELECT Weight, arrayJoin([
               ('ingress', ingress_ns), ('queue', queue_ns), ('parsing', parsing_ns),
               ('feature_hydration', feature_hydration_ns), ('preprocessing', preprocessing_ns),
               ('model_forward', model_forward_ns), ('postprocessing', postprocessing_ns),
               ('downstream', downstream_ns), ('serialization', serialization_ns),
               ('unattributed', unattributed_ns)]) AS stage_value,
           stage_value.1 AS Stage,
           toInt32(if(stage_value.2 > 0, floor(log(stage_value.2) * 100), -1)) AS Bucket
    FROM tailscope_requests
    WHERE RunLabel = {p1:String}
)
GROUP BY Stage, Bucket
ORDER BY Stage, Bucket
