-- Forget a run's derived rows whose root starts in [keep_start, keep_end) ns, before deriving that
-- time window again (a lightweight delete). Parameters: run, keep_start, keep_end.
DELETE FROM tailscope_requests
WHERE RunLabel = {run:String}
  AND toUnixTimestamp64Nano(Timestamp) >= {keep_start:Int64}
  AND toUnixTimestamp64Nano(Timestamp) < {keep_end:Int64}
