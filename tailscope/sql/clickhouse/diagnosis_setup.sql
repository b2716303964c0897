-- Diagnosis: the run's setup attributes (device, dtype, batch policy) for the compute_bound advice.
SELECT SetupAttributes FROM tailscope_runs FINAL WHERE RunLabel = {run:String}
