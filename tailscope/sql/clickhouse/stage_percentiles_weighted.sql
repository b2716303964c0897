-- ../stage_percentiles_weighted.sql on ClickHouse: per stage column (table order, ALL_STAGES), the
-- weighted quantiles [p50, p95, p99, p99.9] in ns: the smallest value whose cumulative weight (in
-- value order) reaches q of the total, less a relative 1e-12. Values, not order statistics (the
-- unweighted file's pairs): tailscope.store.clickhouse.views.stage_percentiles tells them apart.
WITH f AS (
    SELECT * FROM tailscope_requests WHERE {where}
)
SELECT
    arrayMap(q -> toFloat64(arrayMap(p -> p.1, s_ingress)[arrayFirstIndex(c -> c >= q * total, arrayCumSum(arrayMap(p -> p.2, s_ingress)))]), qs) AS ingress_ns,
    arrayMap(q -> toFloat64(arrayMap(p -> p.1, s_queue)[arrayFirstIndex(c -> c >= q * total, arrayCumSum(arrayMap(p -> p.2, s_queue)))]), qs) AS queue_ns,
    arrayMap(q -> toFloat64(arrayMap(p -> p.1, s_parsing)[arrayFirstIndex(c -> c >= q * total, arrayCumSum(arrayMap(p -> p.2, s_parsing)))]), qs) AS parsing_ns,
    arrayMap(q -> toFloat64(arrayMap(p -> p.1, s_feature_hydration)[arrayFirstIndex(c -> c >= q * total, arrayCumSum(arrayMap(p -> p.2, s_feature_hydration)))]), qs) AS feature_hydration_ns,
    arrayMap(q -> toFloat64(arrayMap(p -> p.1, s_preprocessing)[arrayFirstIndex(c -> c >= q * total, arrayCumSum(arrayMap(p -> p.2, s_preprocessing)))]), qs) AS preprocessing_ns,
    arrayMap(q -> toFloat64(arrayMap(p -> p.1, s_model_forward)[arrayFirstIndex(c -> c >= q * total, arrayCumSum(arrayMap(p -> p.2, s_model_forward)))]), qs) AS model_forward_ns,
    arrayMap(q -> toFloat64(arrayMap(p -> p.1, s_postprocessing)[arrayFirstIndex(c -> c >= q * total, arrayCumSum(arrayMap(p -> p.2, s_postprocessing)))]), qs) AS postprocessing_ns,
    arrayMap(q -> toFloat64(arrayMap(p -> p.1, s_downstream)[arrayFirstIndex(c -> c >= q * total, arrayCumSum(arrayMap(p -> p.2, s_downstream)))]), qs) AS downstream_ns,
    arrayMap(q -> toFloat64(arrayMap(p -> p.1, s_serialization)[arrayFirstIndex(c -> c >= q * total, arrayCumSum(arrayMap(p -> p.2, s_serialization)))]), qs) AS serialization_ns,
    arrayMap(q -> toFloat64(arrayMap(p -> p.1, s_unattributed)[arrayFirstIndex(c -> c >= q * total, arrayCumSum(arrayMap(p -> p.2, s_unattributed)))]), qs) AS unattributed_ns
FROM (
    SELECT
        [0.5, 0.95, 0.99, 0.999] AS qs,
        sum(Weight) * (1 - 1e-12) AS total,
        arraySort(groupArray((ingress_ns, Weight))) AS s_ingress,
        arraySort(groupArray((queue_ns, Weight))) AS s_queue,
        arraySort(groupArray((parsing_ns, Weight))) AS s_parsing,
        arraySort(groupArray((feature_hydration_ns, Weight))) AS s_feature_hydration,
        arraySort(groupArray((preprocessing_ns, Weight))) AS s_preprocessing,
        arraySort(groupArray((model_forward_ns, Weight))) AS s_model_forward,
        arraySort(groupArray((postprocessing_ns, Weight))) AS s_postprocessing,
        arraySort(groupArray((downstream_ns, Weight))) AS s_downstream,
        arraySort(groupArray((serialization_ns, Weight))) AS s_serialization,
        arraySort(groupArray((unattributed_ns, Weight))) AS s_unattributed
    FROM f
)
