-- Diagnosis: how large a run is and when it runs (spans, first and last span start in ns), to decide
-- whether to diagnose it whole or from a sample of time windows (diagnosis/sample.py).
SELECT count(*) AS Spans, min(epoch_ns(Timestamp)) AS FirstNs, max(epoch_ns(Timestamp)) AS LastNs
FROM otel_traces
WHERE RunLabel = $run AND {windows}
