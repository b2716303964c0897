r AS (
    SELECT min(t) AS t0,
           greatest(toInt64(1), toInt64(ceil((max(t) - min(t) + 1) / toFloat64({p2:Int64})))) AS w,
           toFloat64({p3:Int64}) AS bpd
    FROM v
),
binned AS (
    SELECT intDiv(v.t - r.t0, r.w) AS tb,
           toInt32(floor(log10(greatest(v.ns, 1000) / 1e6) * r.bpd)) AS lb,
