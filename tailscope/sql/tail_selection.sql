-- Tail vs body: the filtered requests (f), the tail threshold (q) and each request marked selected
-- or not (m). Included by tail_stages.sql and tail_attributes.sql ({include:tail_selection}).
-- Params after the filter's: tail quantile, use_rect (bool), rect start, end, stage ('' for e2e),
-- low ns, stage again, high ns. Selected = inside the rectangle [start, end) x [low, high) of e2e or
-- stage latency when use_rect, else Duration >= q(tail quantile).
WITH f AS (
    SELECT * FROM requests WHERE {where}
),
q AS (
    SELECT quantile_cont(Duration, ?) AS qd FROM f
),
{include:tail_marked}
)
