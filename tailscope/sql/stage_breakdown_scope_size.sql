-- How many requests the stage breakdown sampled (_ts_scope, stage_breakdown_scope.sql).
SELECT count(*) FROM _ts_scope
