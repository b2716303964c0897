           CASE ? WHEN 'ingress' THEN ingress_ns WHEN 'queue' THEN queue_ns WHEN 'parsing' THEN parsing_ns
                  WHEN 'feature_hydration' THEN feature_hydration_ns WHEN 'preprocessing' THEN preprocessing_ns
                  WHEN 'model_forward' THEN model_forward_ns WHEN 'postprocessing' THEN postprocessing_ns
                  WHEN 'downstream' THEN downstream_ns WHEN 'serialization' THEN serialization_ns
                  WHEN 'unattributed' THEN unattributed_ns ELSE Duration END AS ns
    FROM f
),
r AS (
    SELECT min(t) AS t0, greatest(1, CAST(ceil((max(t) - min(t) + 1) / CAST(? AS DOUBLE)) AS BIGINT)) AS w,
           CAST(? AS DOUBLE) AS bpd
    FROM v
),
binned AS (
    SELECT (v.t - r.t0) // r.w AS tb,
           CAST(floor(log10(greatest(v.ns, 1000) / 1e6) * r.bpd) AS INTEGER) AS lb,
