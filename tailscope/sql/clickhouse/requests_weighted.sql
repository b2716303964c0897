-- Whether any of the filtered requests stands for more or fewer than itself, as ../requests_weighted.sql.
SELECT count() > 0 FROM (SELECT 1 FROM tailscope_requests WHERE ({where}) AND Weight != 1 LIMIT 1)
