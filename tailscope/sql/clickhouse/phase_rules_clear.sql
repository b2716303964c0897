-- Forget the stored phase rules before storing an edited list (write.replace_phase_rules).
TRUNCATE TABLE tailscope_phase_rules
