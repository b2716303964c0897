-- Rows of request_histogram (schema.sql) over {requests} (a relation of `requests` rows chosen by
-- tailscope.store.duckdb.histogram: a run, or the traces a refresh derives), each count and sum
-- multiplied by $sign (1 to add requests, -1 to take away the rows a refresh replaces).
SELECT
    RunLabel,
    CAST(CASE WHEN Duration > 0 THEN floor(ln(Duration) * 100) ELSE -1 END AS INTEGER) AS Bucket,
    $sign * count(*) AS Requests,
    $sign * sum(Weight) AS Weight,
    $sign * coalesce(sum(Weight) FILTER (WHERE IsError), 0) AS Errors,
    $sign * sum(Weight * Duration) AS DurationNs,
    $sign * sum(Weight * ingress_ns) AS ingress_ns,
    $sign * sum(Weight * queue_ns) AS queue_ns,
    $sign * sum(Weight * parsing_ns) AS parsing_ns,
    $sign * sum(Weight * feature_hydration_ns) AS feature_hydration_ns,
    $sign * sum(Weight * preprocessing_ns) AS preprocessing_ns,
    $sign * sum(Weight * model_forward_ns) AS model_forward_ns,
    $sign * sum(Weight * postprocessing_ns) AS postprocessing_ns,
    $sign * sum(Weight * downstream_ns) AS downstream_ns,
    $sign * sum(Weight * serialization_ns) AS serialization_ns,
    $sign * sum(Weight * unattributed_ns) AS unattributed_ns
FROM {requests}
GROUP BY ALL
