-- One run's selection (tailscope_runs): its time range and resource-attribute filters. Param: run.
SELECT StartNs, EndNs, Filters FROM tailscope_runs FINAL WHERE RunLabel = {run:String}
