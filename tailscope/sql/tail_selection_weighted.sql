-- tail_selection.sql for requests that stand for others (requests.Weight, a head-sampled run): the
-- tail threshold is the weighted quantile (as waterfall_weighted.sql). Read tail_selection.sql.
-- The marking (m: rectangle, else Duration >= q) is tail_marked.sql, shared with tail_selection.sql.
-- Tail vs body: the filtered requests (f), the tail threshold (q) and each request marked selected
-- or not (m). Included by tail_stages.sql and tail_attributes.sql ({include:tail_selection}).
-- Params after the filter's: tail quantile, use_rect (bool), rect start, end, stage ('' for e2e),
-- low ns, stage again, high ns. Selected = inside the rectangle [start, end) x [low, high) of e2e or
-- stage latency when use_rect, else Duration >= q(tail quantile).
WITH f AS (
    SELECT * FROM requests WHERE {where}
),
q AS (  -- the weighted quantile: the smallest Duration whose cumulative weight reaches q of the total
    SELECT min(Duration) FILTER (WHERE cw >= ? * total)::DOUBLE AS qd
    FROM (SELECT Duration, sum(Weight) OVER (ORDER BY Duration ROWS UNBOUNDED PRECEDING) AS cw,
                 sum(Weight) OVER () * (1 - 1e-12) AS total
          FROM f)
),
{include:tail_marked}
)
