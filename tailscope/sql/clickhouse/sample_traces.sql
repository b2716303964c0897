-- Up to {traces} trace ids of a run, the stage mapping's sample (DuckDB's stage_mapping_scope.sql
-- picks by its hash; the same traces when the sample covers the run), from the run's derived
-- requests (one per trace), taken from a few stretches of time: blocks of time sized to hold about
-- traces/4 requests, in the order of a hash of their number, the requests in a block by
-- cityHash64(TraceId) (which stage a span name takes does not depend on when; the tail's samples
-- weigh requests equally instead: stage_breakdown_scope.sql); tailscope.store.clickhouse.sample then reads
-- only the seconds their spans start in. Params: run, traces.
WITH r AS (
    SELECT TraceId, min(toUnixTimestamp64Nano(Timestamp)) AS StartNs
    FROM tailscope_requests
    WHERE RunLabel = {run:String}
    GROUP BY TraceId
),
blocks AS (
    SELECT TraceId, StartNs,
           greatest(toInt64(1000000000), toInt64((max(StartNs) OVER () - min(StartNs) OVER ()) * {traces:UInt64}
                                                 / (4 * count() OVER ()))) AS block_ns
    FROM r
)
SELECT TraceId FROM blocks
ORDER BY cityHash64(intDiv(StartNs, block_ns)), cityHash64(TraceId), TraceId
LIMIT {traces:UInt64}
