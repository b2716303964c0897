-- Whether a run has derived rows (before a derive: a lightweight delete costs ~1 s even when it
-- removes nothing). Parameter: run.
SELECT count() > 0 FROM tailscope_requests WHERE RunLabel = {run:String}
