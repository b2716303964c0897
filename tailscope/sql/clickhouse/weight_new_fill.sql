-- One run's derived rows into the migration's table (requests_weight.ensure) with the weight its
-- root span carries among the run's spans ({scope}: statements.run_scope; another run may hold the
-- same span without a weight, or with another): `tailscope.sample.weight` of a head-sampled run,
-- 1 without it. Only spans that carry the key are read past the PREWHERE.
-- Parameters: run, the selection's.
INSERT INTO _tailscope_requests_new
SELECT r.*, coalesce(w.Weight, 1) AS Weight
FROM (SELECT * FROM tailscope_requests WHERE RunLabel = {run:String}) AS r
LEFT JOIN (
    SELECT TraceId, SpanId, any(toFloat64OrNull(SpanAttributes['tailscope.sample.weight'])) AS Weight
    FROM {scope} AS s
    WHERE mapContains(SpanAttributes, 'tailscope.sample.weight')
    GROUP BY TraceId, SpanId
) AS w ON w.TraceId = r.TraceId AND w.SpanId = r.SpanId
SETTINGS join_use_nulls = 1
