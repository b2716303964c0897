-- Derived rows of runs no longer defined (no selection to read their spans from) into the
-- migration's table with weight 1: nothing is left behind. Parameter: runs (the ones filled).
INSERT INTO _tailscope_requests_new
SELECT *, 1 AS Weight FROM tailscope_requests WHERE RunLabel NOT IN {runs:Array(String)}
