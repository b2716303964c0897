-- The requests of a run in some e2e buckets of its histogram (request_histogram: floor(100 ln ns),
-- -1 for 0), ascending: histogram.exact_quantile reads a percentile's exact value among them.
-- Params: run, low ns, high ns (a range a little wider than the buckets', so DuckDB reads the
-- Duration column only where they can be), first bucket, last bucket.
SELECT Duration, Weight
FROM requests
WHERE RunLabel = ?
  AND Duration BETWEEN ? AND ?
  AND CAST(CASE WHEN Duration > 0 THEN floor(ln(Duration) * 100) ELSE -1 END AS INTEGER) BETWEEN ? AND ?
ORDER BY Duration
