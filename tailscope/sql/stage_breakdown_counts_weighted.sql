-- How many requests each group's sample stands for (the sum of their weights), as
-- stage_breakdown_counts.sql for stage_breakdown_scope_weighted.sql's _ts_scope.
SELECT grp, sum(Weight) FROM _ts_scope GROUP BY grp
