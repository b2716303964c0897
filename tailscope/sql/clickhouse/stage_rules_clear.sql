-- Forget the stored stage rules before storing an edited list (write.replace_stage_rules).
TRUNCATE TABLE tailscope_stage_rules
