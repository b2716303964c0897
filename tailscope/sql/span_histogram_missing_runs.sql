-- Runs whose span_histogram rows do not count their spans (runs.SpanCount): written before the table
-- existed, or by a writer that did not keep it. `tailscope migrate` builds them.
SELECT r.RunLabel
FROM runs AS r LEFT JOIN (SELECT RunLabel, sum(Spans) AS n FROM span_histogram GROUP BY RunLabel) AS h
    ON h.RunLabel = r.RunLabel
WHERE r.SpanCount <> coalesce(h.n, 0)
ORDER BY r.RunLabel
