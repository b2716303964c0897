-- The stage rules in force, in order.
SELECT position, stage, span_kind, name_regex, attribute_regex, description
FROM tailscope_stage_rules
ORDER BY position
