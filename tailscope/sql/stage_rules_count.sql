-- Whether the rules were seeded.
SELECT count(*) FROM stage_rules
