-- Schema version 4 -> 5, in place (tailscope.store.duckdb.migrate, one transaction): the kept path
-- rows a stage-rule edit re-maps (span_paths, request_paths, derive_state.PathsKept, schema.sql says
-- what they hold). They start empty and PathsKept NULL: the next rule edit derives every run from its
-- spans, as before, and fills them. Nothing else changes.
ALTER TABLE derive_state ADD COLUMN IF NOT EXISTS PathsKept BOOLEAN;
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
UPDATE schema_version SET version = 5;
