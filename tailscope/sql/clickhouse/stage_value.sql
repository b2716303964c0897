-- One stage's exclusive time (ns) of a request, or its e2e Duration when the stage is '' (p1):
-- included by heatmap.sql and request_list.sql ({include:stage_value}).
CASE {p1:String} WHEN 'ingress' THEN ingress_ns WHEN 'queue' THEN queue_ns WHEN 'parsing' THEN parsing_ns
     WHEN 'feature_hydration' THEN feature_hydration_ns WHEN 'preprocessing' THEN preprocessing_ns
     WHEN 'model_forward' THEN model_forward_ns WHEN 'postprocessing' THEN postprocessing_ns
     WHEN 'downstream' THEN downstream_ns WHEN 'serialization' THEN serialization_ns
     WHEN 'unattributed' THEN unattributed_ns ELSE Duration END
