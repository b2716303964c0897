-- Distinct non-empty services, routes and instances of request roots (param: run, or NULL).
SELECT list(DISTINCT ServiceName ORDER BY ServiceName) FILTER (WHERE ServiceName <> ''),
       list(DISTINCT Route ORDER BY Route) FILTER (WHERE Route <> ''),
       list(DISTINCT Instance ORDER BY Instance) FILTER (WHERE Instance <> '')
FROM requests
WHERE RunLabel = coalesce(?, RunLabel)
