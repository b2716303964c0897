-- ../histogram_bucket_durations.sql on ClickHouse. Params: run, low ns, high ns, first bucket, last bucket.
SELECT Duration, Weight
FROM tailscope_requests
WHERE RunLabel = {p1:String}
  AND Duration BETWEEN {p2:Int64} AND {p3:Int64}
  AND toInt32(if(Duration > 0, floor(log(Duration) * 100), -1)) BETWEEN {p4:Int32} AND {p5:Int32}
ORDER BY Duration
