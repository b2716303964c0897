-- Tail vs body, per stage: mean time of the selected requests vs the rest.
-- Params: the filter's, then tail_selection.sql's.
-- Tail vs body: the filtered requests (f), the tail threshold (q) and each request marked selected
-- or not (m). Included by tail_stages.sql and tail_attributes.sql ({include:tail_selection}).
-- Params after the filter's: tail quantile, use_rect (bool), rect start, end, stage ('' for e2e),
-- low ns, stage again, high ns. Selected = inside the rectangle [start, end) x [low, high) of e2e or
-- stage latency when use_rect, else Duration >= q(tail quantile).
WITH f AS (
    SELECT * FROM requests WHERE RunLabel = ?
),
q AS (
    SELECT quantile_cont(Duration, ?) AS qd FROM f
),
m AS (
    SELECT f.*,
           CASE WHEN ? THEN
               f.Timestamp >= ? AND f.Timestamp < ?
               AND CASE ? WHEN 'ingress' THEN ingress_ns WHEN 'queue' THEN queue_ns WHEN 'parsing' THEN parsing_ns
                   WHEN 'feature_hydration' THEN feature_hydration_ns WHEN 'preprocessing' THEN preprocessing_ns
                   WHEN 'model_forward' THEN model_forward_ns WHEN 'postprocessing' THEN postprocessing_ns
                   WHEN 'downstream' THEN downstream_ns WHEN 'serialization' THEN serialization_ns
                   WHEN 'unattributed' THEN unattributed_ns ELSE Duration END >= ?
               AND CASE ? WHEN 'ingress' THEN ingress_ns WHEN 'queue' THEN queue_ns WHEN 'parsing' THEN parsing_ns
                   WHEN 'feature_hydration' THEN feature_hydration_ns WHEN 'preprocessing' THEN preprocessing_ns
                   WHEN 'model_forward' THEN model_forward_ns WHEN 'postprocessing' THEN postprocessing_ns
                   WHEN 'downstream' THEN downstream_ns WHEN 'serialization' THEN serialization_ns
                   WHEN 'unattributed' THEN unattributed_ns ELSE Duration END < ?
           ELSE f.Duration >= q.qd END AS selected
    FROM f, q
)
SELECT selected, count(*) AS n, avg(Duration) AS mean_ns, avg(COLUMNS('_ns$'))
FROM m
GROUP BY selected
-- params: ["r1", 0.99, false, null, null, "", null, "", null]
