-- The phase rules on ClickHouse (the DuckDB store's phase_rules, ../schema.sql): positions 1..n,
-- edited in the dashboard. Empty: the defaults apply (phases.default_phase_rules), as on a store
-- made before this table existed.
CREATE TABLE IF NOT EXISTS tailscope_phase_rules (
    position Int32,
    framework String,
    phase String,
    stage String,
    source String,
    start_key String,
    end_key Nullable(String),
    unit Nullable(String),
    name_regex Nullable(String),
    description String
)
ENGINE = MergeTree
ORDER BY position
