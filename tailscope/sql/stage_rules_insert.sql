-- One stage rule (tailscope.analysis.stages.replace_rules renumbers positions 1..n).
INSERT INTO stage_rules (position, stage, span_kind, name_regex, attribute_regex, description)
VALUES (?, ?, ?, ?, ?, ?)
