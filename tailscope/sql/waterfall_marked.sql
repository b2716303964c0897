{include:band_window_fill}
marked AS (
    SELECT f.*,
           (f.Duration >= q.qs[3]
               AND (f.Duration < q.qs[4] OR ((? OR q.qs[3] = q.qs[4]) AND f.Duration <= q.qs[4])))
           OR (w.inside = 0 AND f.Duration = w.first_above) AS in_band,
           f.Duration BETWEEN q.qs[1] AND q.qs[2]
               OR (w.median_inside = 0 AND f.Duration = w.nearest_median) AS in_median
    FROM f, q, window_fill AS w
)
