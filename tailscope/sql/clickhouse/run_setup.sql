-- Setup attributes of one run (tailscope_runs.SetupAttributes), as key/value rows. Param: p1 = run.
SELECT k AS key, v AS value
FROM tailscope_runs FINAL
ARRAY JOIN mapKeys(SetupAttributes) AS k, mapValues(SetupAttributes) AS v
WHERE RunLabel = {p1:String}
