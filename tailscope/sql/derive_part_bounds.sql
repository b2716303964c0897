-- Where a whole-run derive's parts begin and end in time: the run's first span start, its last, its
-- longest span (ns), and the span-start quantiles that cut it into parts of about equal span counts
-- (approximate: any cut is correct, an even one only keeps the parts' sizes alike).
-- Params: the quantiles (FLOAT[]), run.
SELECT min(epoch_ns(Timestamp)), max(epoch_ns(Timestamp)), max(Duration),
       approx_quantile(epoch_ns(Timestamp), ?::FLOAT[])
FROM otel_traces WHERE RunLabel = ?
