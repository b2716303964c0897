-- Per request (TK): attributed ns per stage (rounded) and SpanTimes, from per-path rows. Shared by the
-- derive (derive_paths_requests.sql: the paths of the traces derived) and a rule edit's re-map
-- (remap_sums.sql: a run's kept paths under the new rules), so that both sum the same terms in the
-- same grouping. Placeholders (fixed SQL): paths, a relation of (TK, Bucket, Ns) rows; named, the
-- same rows with SpanName, for the requests whose TK is at most the parameter
-- (statements.SPAN_TIMES_MAX_HASH). Bucket 'unattributed' goes to no stage column (derive_requests.sql
-- gives the root's rest to unattributed_ns).
SELECT s.*, n.SpanTimes
FROM (
    SELECT TK,
           CAST(round(coalesce(sum(Ns) FILTER (WHERE Bucket = 'ingress'), 0)) AS BIGINT) AS ingress_ns,
           CAST(round(coalesce(sum(Ns) FILTER (WHERE Bucket = 'queue'), 0)) AS BIGINT) AS queue_ns,
           CAST(round(coalesce(sum(Ns) FILTER (WHERE Bucket = 'parsing'), 0)) AS BIGINT) AS parsing_ns,
           CAST(round(coalesce(sum(Ns) FILTER (WHERE Bucket = 'feature_hydration'), 0)) AS BIGINT)
               AS feature_hydration_ns,
           CAST(round(coalesce(sum(Ns) FILTER (WHERE Bucket = 'preprocessing'), 0)) AS BIGINT) AS preprocessing_ns,
           CAST(round(coalesce(sum(Ns) FILTER (WHERE Bucket = 'model_forward'), 0)) AS BIGINT) AS model_forward_ns,
           CAST(round(coalesce(sum(Ns) FILTER (WHERE Bucket = 'postprocessing'), 0)) AS BIGINT) AS postprocessing_ns,
           CAST(round(coalesce(sum(Ns) FILTER (WHERE Bucket = 'downstream'), 0)) AS BIGINT) AS downstream_ns,
           CAST(round(coalesce(sum(Ns) FILTER (WHERE Bucket = 'serialization'), 0)) AS BIGINT) AS serialization_ns
    FROM {paths}
    GROUP BY TK
) AS s
LEFT JOIN (
    SELECT TK, list({'stage': Bucket, 'span_name': SpanName, 'ns': Ns} ORDER BY Bucket, SpanName) AS SpanTimes
    FROM (SELECT TK, Bucket, SpanName, sum(Ns) AS Ns FROM {named} WHERE TK <= ?::UBIGINT GROUP BY ALL)
    GROUP BY TK
) AS n ON n.TK = s.TK
