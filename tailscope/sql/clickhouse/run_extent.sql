-- ../run_extent.sql on ClickHouse. Param: run.
SELECT count() AS requests, min(Timestamp) AS first_request, max(Timestamp) AS last_request,
       min(toUnixTimestamp64Nano(Timestamp)) AS first_start_ns,
       max(toUnixTimestamp64Nano(Timestamp) + Duration) AS last_end_ns,
       arraySort(groupUniqArray(toString(ServiceName))) AS services
FROM tailscope_requests
WHERE RunLabel = {p1:String}
