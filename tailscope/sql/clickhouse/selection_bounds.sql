-- What a selection of otel_traces holds: first and last span start (ns) and the span count, for
-- `tailscope select` (a run's time range defaults to the span starts its filters match). Params: the
-- selection's (run_start, run_end, run_filter_keys, run_filter_values).
SELECT min(toUnixTimestamp64Nano(Timestamp)), max(toUnixTimestamp64Nano(Timestamp)), count()
FROM otel_traces
WHERE Timestamp BETWEEN fromUnixTimestamp64Nano({run_start:Int64}) AND fromUnixTimestamp64Nano({run_end:Int64})
  AND arrayAll((k, v) -> ResourceAttributes[k] = v, {run_filter_keys:Array(String)},
               {run_filter_values:Array(String)})
