-- Setup attributes of one run (runs.SetupAttributes), as key/value rows.
SELECT unnest(map_keys(SetupAttributes)) AS key, unnest(map_values(SetupAttributes)) AS value
FROM runs
WHERE RunLabel = ?
