-- How many requests of each group (band / median) the stage breakdown sampled.
SELECT grp, count(*) FROM _ts_scope GROUP BY grp
