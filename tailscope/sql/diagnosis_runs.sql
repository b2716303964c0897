-- Diagnosis: the runs in the store, for `tailscope diagnose` without --run and for its error message.
SELECT RunLabel FROM otel_traces GROUP BY RunLabel ORDER BY RunLabel
