-- Tail vs body, as ../tail_selection.sql: the filtered requests (f), each marked selected or not (m).
-- Included by tail_stages.sql and tail_attributes.sql ({include:tail_selection}).
-- Params after the filter's: p1 stage ('' for e2e), p2 the tail threshold in ns (quantile_cont of
-- Duration, from order statistics: tailscope.analysis.quantiles), p3 use_rect, p4 rect start, p5
-- end, p6 low ns, p7 high ns. Selected = inside the rectangle [start, end) x [low, high) of e2e or
-- stage latency when use_rect, else Duration >= the threshold.
WITH f AS (
    SELECT * FROM tailscope_requests WHERE {where}
),
m AS (
    SELECT *,
           if({p3:Bool},
              Timestamp >= {p4:Nullable(DateTime64(9, 'UTC'))} AND Timestamp < {p5:Nullable(DateTime64(9, 'UTC'))}
              AND (CASE {p1:String} WHEN 'ingress' THEN ingress_ns WHEN 'queue' THEN queue_ns WHEN 'parsing' THEN parsing_ns
                      WHEN 'feature_hydration' THEN feature_hydration_ns WHEN 'preprocessing' THEN preprocessing_ns
                      WHEN 'model_forward' THEN model_forward_ns WHEN 'postprocessing' THEN postprocessing_ns
                      WHEN 'downstream' THEN downstream_ns WHEN 'serialization' THEN serialization_ns
                      WHEN 'unattributed' THEN unattributed_ns ELSE Duration END) >= {p6:Nullable(Int64)}
              AND (CASE {p1:String} WHEN 'ingress' THEN ingress_ns WHEN 'queue' THEN queue_ns WHEN 'parsing' THEN parsing_ns
                      WHEN 'feature_hydration' THEN feature_hydration_ns WHEN 'preprocessing' THEN preprocessing_ns
                      WHEN 'model_forward' THEN model_forward_ns WHEN 'postprocessing' THEN postprocessing_ns
                      WHEN 'downstream' THEN downstream_ns WHEN 'serialization' THEN serialization_ns
                      WHEN 'unattributed' THEN unattributed_ns ELSE Duration END) < {p7:Nullable(Int64)},
              Duration >= {p2:Float64}) AS selected
    FROM f
)
