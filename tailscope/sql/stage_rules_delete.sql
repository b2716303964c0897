-- Before storing a new rule list.
DELETE FROM stage_rules
