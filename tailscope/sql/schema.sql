-- tailscope store schema, version 5. Applied by tailscope.store.duckdb.connection.ensure_schema, statement by statement;
-- an older store is migrated in place by tailscope.store.duckdb.migrate (migrate_v1_to_v2.sql,
-- migrate_v2_to_v3.sql, migrate_v3_to_v4.sql, migrate_v4_to_v5.sql).
-- Column names and meanings follow the OpenTelemetry Collector ClickHouse exporter's otel_traces table,
-- so the same queries can later run on ClickHouse. DuckDB types: Timestamp TIMESTAMP_NS (ns precision),
-- Duration BIGINT nanoseconds. RunLabel is ours: every span belongs to exactly one run.
-- Attributes, events and links are JSON text (chosen by measurement, bench/bench_attribute_forms.py:
-- 1 M spans insert 4x faster than as MAP columns, and a lookup, `SpanAttributes->>'http.route'`, stays
-- ~0.1 s per 1 M rows):
--   ResourceAttributes, SpanAttributes  an object of string values: {"http.route":"/predict",...}
--   Events  an array of {"Timestamp": ns since the epoch, "Name": "...", "Attributes": {...}}
--   Links   an array of {"TraceId": "...", "SpanId": "...", "TraceState": "...", "Attributes": {...}}
-- Empty ones are '{}' and '[]'.
CREATE TABLE IF NOT EXISTS schema_version (
    version INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS otel_traces (
    Timestamp TIMESTAMP_NS NOT NULL,
    TraceId VARCHAR NOT NULL,
    SpanId VARCHAR NOT NULL,
    ParentSpanId VARCHAR NOT NULL,
    TraceState VARCHAR NOT NULL,
    SpanName VARCHAR NOT NULL,
    SpanKind VARCHAR NOT NULL,
    ServiceName VARCHAR NOT NULL,
    ResourceAttributes VARCHAR NOT NULL,
    ScopeName VARCHAR NOT NULL,
    ScopeVersion VARCHAR NOT NULL,
    SpanAttributes VARCHAR NOT NULL,
    Duration BIGINT NOT NULL,
    StatusCode VARCHAR NOT NULL,
    StatusMessage VARCHAR NOT NULL,
    Events VARCHAR NOT NULL,
    Links VARCHAR NOT NULL,
    RunLabel VARCHAR NOT NULL
);
CREATE TABLE IF NOT EXISTS runs (
    RunLabel VARCHAR PRIMARY KEY,
    SourceFiles VARCHAR[] NOT NULL,
    LoadedAt TIMESTAMP NOT NULL,
    SpanCount BIGINT NOT NULL,
    TraceCount BIGINT NOT NULL,
    SetupAttributes MAP(VARCHAR, VARCHAR) NOT NULL
);
-- Analysis tables (tailscope.analysis, see ARCHITECTURE.md "Stage mapping and analysis").
-- stage_rules: the ordered, editable rules that map a span to a canonical stage. Positions run 1..n,
-- the first rule whose set conditions all hold wins. Seeded with tailscope.analysis.stages.default_rules.
CREATE TABLE IF NOT EXISTS stage_rules (
    position INTEGER PRIMARY KEY,
    stage VARCHAR NOT NULL,
    span_kind VARCHAR,
    name_regex VARCHAR,
    attribute_regex VARCHAR,
    description VARCHAR NOT NULL
);
-- phase_rules: the ordered, editable rules that turn a span's self-reported phases (a serving
-- framework's durations carried as attributes, or start/end events) into stage intervals under that
-- span (tailscope.analysis.phases, sql/phase_spans.sql). Seeded with phases.default_phase_rules.
CREATE TABLE IF NOT EXISTS phase_rules (
    position INTEGER PRIMARY KEY,
    framework VARCHAR NOT NULL,
    phase VARCHAR NOT NULL,
    stage VARCHAR NOT NULL,
    source VARCHAR NOT NULL,
    start_key VARCHAR NOT NULL,
    end_key VARCHAR,
    unit VARCHAR,
    name_regex VARCHAR,
    description VARCHAR NOT NULL
);
-- requests: one row per trace that has a request root, with the root's exclusive time per stage.
-- The stage columns are the canonical stages (tailscope.vocabulary.ALL_STAGES) in nanoseconds and
-- add up to Duration exactly. Wide rather than one row per (request, stage): a waterfall is then one
-- scan of ~1 M rows with ten AVGs instead of a join/pivot over 10 M rows (measured: bench/RESULTS.md).
-- Weight: how many requests this one stands for, the root span's `tailscope.sample.weight` (a
-- head-sampled run, tailscope.instrument.sampling), 1 without it. Views weight their means,
-- percentiles and counts by it (*_weighted.sql) when a selection holds a weight other than 1.
-- SpanTimes: the request's attributed time (ns, not rounded) per (stage, span name) of its spans, the
-- root's own time under 'unattributed' (span_tree_requests.sql): what the stage breakdown sums over
-- its sample of requests instead of reading their spans again. NULL in rows derived before version 4
-- (their run's next derive fills it, and until then the breakdown reads those requests' spans).
CREATE TABLE IF NOT EXISTS requests (
    RunLabel VARCHAR NOT NULL,
    TraceId VARCHAR NOT NULL,
    SpanId VARCHAR NOT NULL,
    Timestamp TIMESTAMP_NS NOT NULL,
    ServiceName VARCHAR NOT NULL,
    Route VARCHAR NOT NULL,
    Instance VARCHAR NOT NULL,
    Duration BIGINT NOT NULL,
    IsError BOOLEAN NOT NULL,
    ClientDuration BIGINT,
    SpanCount INTEGER NOT NULL,
    DominantStage VARCHAR NOT NULL,
    ingress_ns BIGINT NOT NULL,
    queue_ns BIGINT NOT NULL,
    parsing_ns BIGINT NOT NULL,
    feature_hydration_ns BIGINT NOT NULL,
    preprocessing_ns BIGINT NOT NULL,
    model_forward_ns BIGINT NOT NULL,
    postprocessing_ns BIGINT NOT NULL,
    downstream_ns BIGINT NOT NULL,
    serialization_ns BIGINT NOT NULL,
    unattributed_ns BIGINT NOT NULL,
    Weight DOUBLE NOT NULL DEFAULT 1,
    SpanTimes STRUCT(stage VARCHAR, span_name VARCHAR, ns DOUBLE)[]
);
-- derive_state: how many of a run's spans its derived rows reflect, so a writer that names the traces
-- it touched gets only those recomputed (the receiver flushes often). MaxRowid is unused (-1).
-- LongestNs: at least the run's longest request (ns, server or client-observed), kept by each derive
-- so that a flush finds how far its traces can reach without scanning the run's requests (NULL: not
-- known yet, as in a store derived before the column existed: then they are scanned once).
CREATE TABLE IF NOT EXISTS derive_state (
    RunLabel VARCHAR PRIMARY KEY,
    SpanRows BIGINT NOT NULL,
    MaxRowid BIGINT NOT NULL
);
ALTER TABLE derive_state ADD COLUMN IF NOT EXISTS LongestNs BIGINT;
-- PathsKept: the run keeps request_paths rows for every request it has (written lazily: by the first
-- stage-rule edit, then kept current by its derives, derive.py), false for a run loaded since, NULL
-- in a store migrated from version 4: a stage-rule edit derives such a run from its spans, keeping them.
ALTER TABLE derive_state ADD COLUMN IF NOT EXISTS PathsKept BOOLEAN;
-- PhaseCandidates: whether any of the run's spans is one the phase rules in force could read (an
-- attribute key or event name a rule names: phase_candidates.sql), found by each derive on the way
-- (derive.py: a phase-rule edit derives every run again). False lets the diagnosis skip the phase
-- spans' statement, which finds nothing then (reader.py). NULL: not known (a run derived before the
-- column existed, added to such a store by the writer's schema step, as LongestNs was, until its next
-- whole derive): the statement runs.
ALTER TABLE derive_state ADD COLUMN IF NOT EXISTS PhaseCandidates BOOLEAN;
-- stage_mapping_kept: the stage mapping a diagnosis of the run reads (its first read window's traces,
-- or the run's), recorded by each whole derive with what it was computed for (the run's span count,
-- traces, window, a digest of the rules in force), one row per (span name, kind, stage, rule): the
-- reader answers from it only where all of them match (store/duckdb/kept_mapping.py). Added to an
-- existing store by the writer's schema step (a store without it: the mapping computed live).
CREATE TABLE IF NOT EXISTS stage_mapping_kept (
    RunLabel VARCHAR NOT NULL,
    SpanRows BIGINT NOT NULL,
    Traces BIGINT NOT NULL,
    WindowFirst BIGINT,
    WindowEnd BIGINT,
    Rules VARCHAR NOT NULL,
    SpanName VARCHAR,
    SpanKind VARCHAR,
    Stage VARCHAR,
    RuleNo INTEGER,
    Spans BIGINT
);
-- What a stage-rule edit re-maps instead of walking every trace again (tailscope.store.duckdb.rule_remap):
-- a span's stage depends on the rules only through its path, the chain of (span name, kind,
-- tailscope.stage or phase rule, attribute-regex hits, SERVER span with children) from its request
-- root down, and its attributed time not at all (span_tree.sql).
-- span_paths: one row per distinct path node. Sig/PSig: the path's and its parent's signature
-- (64-bit hashes, span_tree.sql), PathId a dense number for request_paths. FixedRule: -1 (a valid
-- tailscope.stage attribute) or 20000 + a phase rule's position, else NULL (the stage rules decide).
-- AttrMask/AttrTried/AttrHits: which of the attribute regexes AttrTried (the rules' at the derive)
-- matched the span's attributes (NULL where the rules are not tried). ServerParent: a SERVER span
-- with children and no tailscope.stage attribute (a tier root unless a Server-kind rule matches it).
CREATE TABLE IF NOT EXISTS span_paths (
    PathId INTEGER NOT NULL,
    Sig UBIGINT NOT NULL,
    PSig UBIGINT,
    IsRoot BOOLEAN NOT NULL,
    SpanName VARCHAR NOT NULL,
    SpanKind VARCHAR NOT NULL,
    AttrStage VARCHAR,
    FixedRule INTEGER,
    AttrMask BIGINT,
    ServerParent BOOLEAN NOT NULL,
    AttrTried VARCHAR[] NOT NULL,
    AttrHits VARCHAR[]
);
-- request_paths: per request (TK = hash(TraceId), StartNs its root's start in ns) and path, the
-- attributed ns of the request's spans on that path (not rounded). ~0.9 rows per span.
CREATE TABLE IF NOT EXISTS request_paths (
    RunLabel VARCHAR NOT NULL,
    StartNs BIGINT NOT NULL,
    TK UBIGINT NOT NULL,
    PathId INTEGER NOT NULL,
    Ns DOUBLE NOT NULL
);
-- Per-run pre-aggregates of `requests`: histogram_schema.sql (applied after this file, and `tailscope
-- migrate` applies it alone to a store derived before them).
