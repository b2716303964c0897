-- tail_stages.sql for requests that stand for others (requests.Weight): counts are sums of weights
-- (rounded), means weighted means sum(w·x) / sum(w); the selection is tail_selection_weighted.sql's.
-- Params: the filter's, then tail_selection.sql's.
{include:tail_selection}
SELECT selected, CAST(round(sum(Weight)) AS BIGINT) AS n, sum(Weight * Duration) / sum(Weight) AS mean_ns,
       sum(Weight * COLUMNS('_ns$')) / sum(Weight)
FROM m
GROUP BY selected
