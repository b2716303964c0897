-- How many traces a run's selection holds (after an ingest). Params: the selection's.
SELECT uniqExact(TraceId)
FROM otel_traces
WHERE Timestamp BETWEEN fromUnixTimestamp64Nano({run_start:Int64}) AND fromUnixTimestamp64Nano({run_end:Int64})
  AND arrayAll((k, v) -> ResourceAttributes[k] = v, mapKeys({run_filters:Map(String, String)}),
               mapValues({run_filters:Map(String, String)}))
