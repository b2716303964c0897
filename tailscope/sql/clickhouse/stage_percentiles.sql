-- Exact per-stage percentiles of the filtered requests' exclusive times, as ../stage_percentiles.sql,
-- but as order statistics: per stage column (table order, ALL_STAGES), for [0.5, 0.95, 0.99, 0.999],
-- the pair [x[floor h], x[ceil h]] with h = (n - 1)·q, interpolated by tailscope.analysis.quantiles.
-- First column: n.
WITH f AS (
    SELECT * FROM tailscope_requests WHERE {where}
)
SELECT
    n,
    arrayMap(h -> [s_ingress[toUInt64(floor(h)) + 1], s_ingress[toUInt64(ceil(h)) + 1]], hs) AS ingress_ns,
    arrayMap(h -> [s_queue[toUInt64(floor(h)) + 1], s_queue[toUInt64(ceil(h)) + 1]], hs) AS queue_ns,
    arrayMap(h -> [s_parsing[toUInt64(floor(h)) + 1], s_parsing[toUInt64(ceil(h)) + 1]], hs) AS parsing_ns,
    arrayMap(h -> [s_feature_hydration[toUInt64(floor(h)) + 1], s_feature_hydration[toUInt64(ceil(h)) + 1]], hs) AS feature_hydration_ns,
    arrayMap(h -> [s_preprocessing[toUInt64(floor(h)) + 1], s_preprocessing[toUInt64(ceil(h)) + 1]], hs) AS preprocessing_ns,
    arrayMap(h -> [s_model_forward[toUInt64(floor(h)) + 1], s_model_forward[toUInt64(ceil(h)) + 1]], hs) AS model_forward_ns,
    arrayMap(h -> [s_postprocessing[toUInt64(floor(h)) + 1], s_postprocessing[toUInt64(ceil(h)) + 1]], hs) AS postprocessing_ns,
    arrayMap(h -> [s_downstream[toUInt64(floor(h)) + 1], s_downstream[toUInt64(ceil(h)) + 1]], hs) AS downstream_ns,
    arrayMap(h -> [s_serialization[toUInt64(floor(h)) + 1], s_serialization[toUInt64(ceil(h)) + 1]], hs) AS serialization_ns,
    arrayMap(h -> [s_unattributed[toUInt64(floor(h)) + 1], s_unattributed[toUInt64(ceil(h)) + 1]], hs) AS unattributed_ns
FROM (
    SELECT
        count() AS n,
        arrayMap(q -> (n - 1) * q, [0.5, 0.95, 0.99, 0.999]) AS hs,
        arraySort(groupArray(ingress_ns)) AS s_ingress,
        arraySort(groupArray(queue_ns)) AS s_queue,
        arraySort(groupArray(parsing_ns)) AS s_parsing,
        arraySort(groupArray(feature_hydration_ns)) AS s_feature_hydration,
        arraySort(groupArray(preprocessing_ns)) AS s_preprocessing,
        arraySort(groupArray(model_forward_ns)) AS s_model_forward,
        arraySort(groupArray(postprocessing_ns)) AS s_postprocessing,
        arraySort(groupArray(downstream_ns)) AS s_downstream,
        arraySort(groupArray(serialization_ns)) AS s_serialization,
        arraySort(groupArray(unattributed_ns)) AS s_unattributed
    FROM f
)
