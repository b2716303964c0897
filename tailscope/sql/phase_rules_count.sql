-- Whether the phase rules were seeded.
SELECT count(*) FROM phase_rules
