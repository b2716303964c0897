-- tail_spans.sql's and tail_kv.sql's temporary tables, dropped before they are made and after
-- tail_attributes.sql (one statement each).
DROP TEMPORARY TABLE IF EXISTS {table:Identifier}
