-- How many derived request rows a run has. Param: run.
SELECT count() FROM tailscope_requests WHERE RunLabel = {run:String}
