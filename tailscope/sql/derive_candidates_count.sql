-- Whether a derive's staged phase candidates hold any span (derive_state.PhaseCandidates).
SELECT count(*) > 0 FROM (SELECT 1 FROM temp._ts_phase_candidates LIMIT 1)
