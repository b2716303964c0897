-- The phase rules in force, in position order.
SELECT position, framework, phase, stage, source, start_key, end_key, unit, name_regex, description
FROM phase_rules
ORDER BY position
