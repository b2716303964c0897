-- with few requests a band's window can fall between two of them (20 requests: q.99 and q.999 both
-- lie between the two slowest): the band then holds the first request at or above its lower bound
window_fill AS (  -- likewise, an empty median band holds the request nearest the median
    SELECT count(*) FILTER (WHERE f.Duration >= q.qs[3] AND f.Duration < q.qs[4]) AS inside,
           min(f.Duration) FILTER (WHERE f.Duration >= q.qs[3]) AS first_above,
           count(*) FILTER (WHERE f.Duration BETWEEN q.qs[1] AND q.qs[2]) AS median_inside,
           arg_min(f.Duration, abs(f.Duration - (q.qs[1] + q.qs[2]) / 2)) AS nearest_median
    FROM f, q
),
