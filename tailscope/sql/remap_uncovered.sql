-- How many kept path nodes were not tried against every one of the given attribute regexes (param:
-- the rules' distinct attribute regexes): a rule edit re-maps kept paths only when this is 0.
SELECT count(*) FROM span_paths
WHERE AttrMask IS NOT NULL AND NOT list_has_all(AttrTried, $patterns::VARCHAR[])
