-- A derive's phase candidates (phase_candidates.sql over its scope), staged so that it can tell
-- whether its scope holds any (derive_state.PhaseCandidates) and span_tree.sql's phase spans read
-- them (phase_candidates_staged.sql) instead of scanning the scope for them a second time.
CREATE TEMP TABLE _ts_phase_candidates AS {candidate_rows}
