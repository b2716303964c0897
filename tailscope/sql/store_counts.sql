-- Why a view found nothing: spans and requests in the store and in one run (param twice: the run).
SELECT (SELECT count(*) FROM otel_traces) AS spans,
       (SELECT count(*) FROM otel_traces WHERE RunLabel = ?) AS run_spans,
       (SELECT count(*) FROM requests) AS requests,
       (SELECT count(*) FROM requests WHERE RunLabel = ?) AS run_requests
