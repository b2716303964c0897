-- ClickHouse span tree, step 3 of 5: nested SERVER spans with children mapped like the request root
-- (see span_tree.sql: tier_roots). Parameter: server_rules.
CREATE TEMPORARY TABLE _ts_tier_roots ENGINE = Memory AS
    SELECT s.TK AS TK, s.SK AS SK
    FROM _ts_spans AS s LEFT SEMI JOIN _ts_spans AS c ON c.TK = s.TK AND c.PK = s.SK
    WHERE s.SpanKind = 'Server' AND s.AttrStage IS NULL
      -- a rule written for SERVER spans (span kind Server) is meant for them: it wins
      AND NOT has({server_rules:Array(Int64)}, coalesce(s.RuleNo, 0))

