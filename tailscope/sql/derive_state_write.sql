-- Record how far refresh_run has read a run (run, span rows, highest rowid).
INSERT OR REPLACE INTO derive_state VALUES (?, ?, ?)
