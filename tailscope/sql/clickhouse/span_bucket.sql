-- The bucket of a span's Duration (ns) for the Gantt's ranks in a large run, as ../span_bucket.sql:
-- floor(1000 ln ns), each bucket 0.1 % wide, -1 for 0 and below (tailscope.store.span_ranks).
if(Duration > 0, toInt32(floor(log(Duration) * 1000)), -1)
