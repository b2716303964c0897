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
