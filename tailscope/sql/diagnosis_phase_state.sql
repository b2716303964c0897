-- Diagnosis: what the run's last derive recorded (derive_state, every column: PhaseCandidates is
-- missing in a store no writer of this version has opened yet) and the run's span count now, which
-- the record must match to speak for every span. Param: run.
SELECT d.*, (SELECT count(*) FROM otel_traces WHERE RunLabel = $run) AS SpansNow
FROM derive_state AS d
WHERE d.RunLabel = $run
