-- Forget a run's span durations before deriving the whole run again (write.refresh_run).
-- Parameter: run.
DELETE FROM tailscope_span_durations WHERE RunLabel = {run:String}
