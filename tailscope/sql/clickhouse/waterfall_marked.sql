window_fill AS (
    SELECT countIf(Duration >= {p3:Float64} AND Duration < {p4:Float64}) AS inside,
           minOrNullIf(Duration, Duration >= {p3:Float64}) AS first_above,
           countIf(Duration >= {p1:Float64} AND Duration <= {p2:Float64}) AS median_inside,
           argMin(Duration, abs(Duration - ({p1:Float64} + {p2:Float64}) / 2)) AS nearest_median
    FROM f
),
marked AS (
    SELECT f.*,
           (f.Duration >= {p3:Float64}
               AND (f.Duration < {p4:Float64}
                    OR (({p5:Bool} OR {p3:Float64} = {p4:Float64}) AND f.Duration <= {p4:Float64})))
           OR (w.inside = 0 AND f.Duration = w.first_above) AS in_band,
           (f.Duration >= {p1:Float64} AND f.Duration <= {p2:Float64})
               OR (w.median_inside = 0 AND f.Duration = w.nearest_median) AS in_median
    FROM f CROSS JOIN window_fill AS w
)
