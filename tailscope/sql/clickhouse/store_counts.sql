-- Why a view found nothing: spans and requests in the store and in one run (p1, p2: the run, or
-- NULL). A run's spans are those of its selection (tailscope_runs: time range, resource filters).
SELECT (SELECT count() FROM otel_traces) AS spans,
       (SELECT count()
        FROM otel_traces AS o,
             (SELECT StartNs, EndNs, Filters FROM tailscope_runs FINAL
              WHERE RunLabel = {p1:Nullable(String)}) AS r
        WHERE o.Timestamp BETWEEN fromUnixTimestamp64Nano(r.StartNs) AND fromUnixTimestamp64Nano(r.EndNs)
          AND arrayAll((k, v) -> o.ResourceAttributes[k] = v, mapKeys(r.Filters), mapValues(r.Filters)))
           AS run_spans,
       (SELECT count() FROM tailscope_requests) AS requests,
       (SELECT count() FROM tailscope_requests WHERE RunLabel = {p2:Nullable(String)}) AS run_requests
