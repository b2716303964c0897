-- Tail vs body, per stage: mean time of the selected requests vs the rest.
-- Params: the filter's, then tail_selection.sql's.
{include:tail_selection}
SELECT selected, count(*) AS n, avg(Duration) AS mean_ns, avg(COLUMNS('_ns$'))
FROM m
GROUP BY selected
