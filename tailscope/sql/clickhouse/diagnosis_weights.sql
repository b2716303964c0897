-- ../diagnosis_weights.sql on ClickHouse: the run's requests whose Weight is not 1, by TraceKey as
-- diagnosis_spans.sql hashes it. Parameters: run (the selection's are bound, unused).
SELECT toInt64(bitShiftRight(cityHash64(TraceId), 1)) AS TraceKey, Weight
FROM tailscope_requests
WHERE RunLabel = {run:String} AND Weight != 1
