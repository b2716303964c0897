-- Compile a regex with RE2 the way the stage CASE will (raises on an invalid pattern).
SELECT regexp_matches('', ?)
