-- Before filling the run's phase spans for the diagnosis (load.py).
DROP TABLE IF EXISTS _ts_phase_spans
