-- The stage rules in force, in the order they are tried.
SELECT position, stage, span_kind, name_regex, attribute_regex, description
FROM stage_rules
ORDER BY position
