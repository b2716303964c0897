-- The phase rules in force, in position order (none stored: the defaults apply).
SELECT position, framework, phase, stage, source, start_key, end_key, unit, name_regex, description
FROM tailscope_phase_rules
ORDER BY position
