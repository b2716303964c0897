-- phase_spans.sql's candidates as a derive staged them (derive.py: phase_candidates.sql over the
-- derive's scope into temp._ts_phase_candidates, counted to record whether the run has any).
SELECT * FROM temp._ts_phase_candidates
