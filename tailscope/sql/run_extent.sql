-- What a run's overview card needs beside its histogram: the request count (checked against the
-- histogram's), the first and last request start, the last end (ns) and the services. Param: the run.
SELECT count(*) AS requests, min(Timestamp) AS first_request, max(Timestamp) AS last_request,
       min(epoch_ns(Timestamp)) AS first_start_ns, max(epoch_ns(Timestamp) + Duration) AS last_end_ns,
       list(DISTINCT ServiceName ORDER BY ServiceName) AS services
FROM requests
WHERE RunLabel = ?
