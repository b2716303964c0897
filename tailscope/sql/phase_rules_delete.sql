-- Before storing a new phase rule list.
DELETE FROM phase_rules
