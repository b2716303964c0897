-- Whether tailscope_span_durations exists yet (a store made before it is migrated: ch_durations).
SELECT count() > 0 FROM system.tables WHERE database = currentDatabase() AND name = 'tailscope_span_durations'
