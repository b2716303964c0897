-- stage_percentiles.sql for requests that stand for others (requests.Weight): per stage column, in
-- table order (ALL_STAGES), the weighted quantiles [p50, p95, p99, p99.9] in ns: the smallest value
-- whose cumulative weight (in value order) reaches q of the total, less a relative 1e-12 (as
-- waterfall_weighted.sql).
WITH f AS (
    SELECT Weight, COLUMNS('_ns$') FROM requests WHERE {where}
),
long AS (
    UNPIVOT f ON COLUMNS('_ns$') INTO NAME stage VALUE ns
),
cumulative AS (
    SELECT stage, ns,
           sum(Weight) OVER (PARTITION BY stage ORDER BY ns ROWS UNBOUNDED PRECEDING) AS cw,
           sum(Weight) OVER (PARTITION BY stage) * (1 - 1e-12) AS total
    FROM long
),
per_stage AS (
    SELECT stage,
           [min(ns) FILTER (WHERE cw >= 0.5 * total), min(ns) FILTER (WHERE cw >= 0.95 * total),
            min(ns) FILTER (WHERE cw >= 0.99 * total), min(ns) FILTER (WHERE cw >= 0.999 * total)]::DOUBLE[] AS qs
    FROM cumulative
    GROUP BY stage
)
SELECT
    first(qs) FILTER (WHERE stage = 'ingress_ns') AS ingress_ns,
    first(qs) FILTER (WHERE stage = 'queue_ns') AS queue_ns,
    first(qs) FILTER (WHERE stage = 'parsing_ns') AS parsing_ns,
    first(qs) FILTER (WHERE stage = 'feature_hydration_ns') AS feature_hydration_ns,
    first(qs) FILTER (WHERE stage = 'preprocessing_ns') AS preprocessing_ns,
    first(qs) FILTER (WHERE stage = 'model_forward_ns') AS model_forward_ns,
    first(qs) FILTER (WHERE stage = 'postprocessing_ns') AS postprocessing_ns,
    first(qs) FILTER (WHERE stage = 'downstream_ns') AS downstream_ns,
    first(qs) FILTER (WHERE stage = 'serialization_ns') AS serialization_ns,
    first(qs) FILTER (WHERE stage = 'unattributed_ns') AS unattributed_ns
FROM per_stage
