-- One phase rule (tailscope.analysis.phases.replace_phase_rules renumbers positions 1..n).
INSERT INTO phase_rules (position, framework, phase, stage, source, start_key, end_key, unit, name_regex,
                         description)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
