-- Whether a run has span durations (before forgetting them: a lightweight delete costs ~1 s even when
-- it removes nothing; before ranking against them). Parameter: run.
SELECT count() > 0 FROM tailscope_span_durations WHERE RunLabel = {run:String}
