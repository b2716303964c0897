-- Forget a run's derived rows before deriving it again (a lightweight delete). Parameter: run.
DELETE FROM tailscope_requests WHERE RunLabel = {run:String}
