-- Diagnosis: the run's requests that stand for more or fewer than themselves (requests.Weight <> 1:
-- a head-sampled run), by TraceKey as diagnosis_spans.sql hashes it; none for a run not sampled.
SELECT CAST(hash(TraceId) >> 1 AS BIGINT) AS TraceKey, Weight
FROM requests
WHERE RunLabel = $run AND Weight <> 1
