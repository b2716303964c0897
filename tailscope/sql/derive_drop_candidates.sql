-- refresh_run's staged phase candidates.
DROP TABLE IF EXISTS temp._ts_phase_candidates
