-- The stage rules on ClickHouse (the DuckDB store's stage_rules, ../schema.sql): positions 1..n,
-- the first rule whose set conditions all hold wins. Seeded with stages.default_rules().
CREATE TABLE IF NOT EXISTS tailscope_stage_rules (
    position Int32,
    stage String,
    span_kind Nullable(String),
    name_regex Nullable(String),
    attribute_regex Nullable(String),
    description String
)
ENGINE = MergeTree
ORDER BY position
