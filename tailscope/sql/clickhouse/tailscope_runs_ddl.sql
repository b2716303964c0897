-- tailscope's runs on ClickHouse: named selections of the exporter's otel_traces, not copies. A run
-- is the spans that start in [StartNs, EndNs] (ns since the epoch) and whose ResourceAttributes hold
-- every (key, value) of Filters (e.g. service.name, deployment.environment, host.name; `tailscope
-- ingest --store` adds tailscope.run = the label to what it writes, and selects on it).
-- ReplacingMergeTree by Version: redefining a run inserts a newer row; readers use FINAL.
CREATE TABLE IF NOT EXISTS tailscope_runs (
    RunLabel String,
    StartNs Int64,
    EndNs Int64,
    Filters Map(String, String),
    SourceFiles Array(String),
    LoadedAt DateTime64(3),
    SetupAttributes Map(String, String),
    Version UInt64
)
ENGINE = ReplacingMergeTree(Version)
ORDER BY RunLabel
