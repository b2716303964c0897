-- A re-mapped run's requests take their new stage columns, dominant stage and SpanTimes from
-- temp._ts_remap (request_stage_sums.sql over its kept paths). The root's duration is the sum of the
-- ten old columns (derive_requests.sql made unattributed_ns the rest), so unattributed_ns is again
-- that duration less the nine stage columns, as a derive from the spans computes it. Param: run.
UPDATE requests SET
    ingress_ns = s.ingress_ns, queue_ns = s.queue_ns, parsing_ns = s.parsing_ns,
    feature_hydration_ns = s.feature_hydration_ns, preprocessing_ns = s.preprocessing_ns,
    model_forward_ns = s.model_forward_ns, postprocessing_ns = s.postprocessing_ns,
    downstream_ns = s.downstream_ns, serialization_ns = s.serialization_ns,
    unattributed_ns = s.RootNs - s.Stages,
    DominantStage = list_extract(
        ['ingress', 'queue', 'parsing', 'feature_hydration', 'preprocessing', 'model_forward',
         'postprocessing', 'downstream', 'serialization', 'unattributed'],
        list_position(s.StageNs, list_max(s.StageNs))),
    SpanTimes = s.SpanTimes
FROM (
    SELECT x.*, RootNs, Stages,
           [x.ingress_ns, x.queue_ns, x.parsing_ns, x.feature_hydration_ns, x.preprocessing_ns,
            x.model_forward_ns, x.postprocessing_ns, x.downstream_ns, x.serialization_ns,
            RootNs - Stages] AS StageNs
    FROM (
        SELECT m.*, r.TraceId,
               r.ingress_ns + r.queue_ns + r.parsing_ns + r.feature_hydration_ns + r.preprocessing_ns
                   + r.model_forward_ns + r.postprocessing_ns + r.downstream_ns + r.serialization_ns
                   + r.unattributed_ns AS RootNs,
               m.ingress_ns + m.queue_ns + m.parsing_ns + m.feature_hydration_ns + m.preprocessing_ns
                   + m.model_forward_ns + m.postprocessing_ns + m.downstream_ns + m.serialization_ns AS Stages
        FROM requests AS r JOIN temp._ts_remap AS m ON m.TK = hash(r.TraceId)
        WHERE r.RunLabel = $run
    ) AS x
) AS s
WHERE requests.RunLabel = $run AND requests.TraceId = s.TraceId
