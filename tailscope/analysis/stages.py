"""Stage mapping: every span gets one canonical stage (tailscope.vocabulary.STAGES).

Order of precedence, first hit wins:
1. the span's explicit `tailscope.stage` attribute, when it names a canonical stage;
2. the request root span is `ingress` (its own self time is reported as `unattributed`), and so is a
   nested SERVER span with children: the entry of another service whose work is traced (a model
   server behind a gateway); its own self time (a batch wait, a handler) is `unattributed` too, as
   the diagnosis, which takes such a span as the request of a proxy tier, sees it;
3. the ordered rules of the `stage_rules` table (data, editable; seeded with `default_rules()`):
   OpenTelemetry semantic conventions first, then span-name patterns;
4. otherwise the parent's stage (a child of a `model.forward` span is model_forward), except that an
   unmatched direct child of the request root (or of a nested SERVER span) is `unattributed`.

The rules become one SQL CASE (`stage_case`) with every regex and stage as a bound parameter; name
regexes are evaluated once per distinct span name, not once per span (see sql/span_tree.sql).
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from tailscope import sql
from tailscope.analysis.phases import PHASE_RULE_BASE, phase_rule_label, phase_rules_in_force
from tailscope.analysis.rule_checks import regex_problems, save_on_either
from tailscope.analysis.runs import runs_with_spans
from tailscope.analysis.source import Source, reading
from tailscope.analysis.types import PhaseRule, StageRule
from tailscope.store.ch_conn import dialect_of
from tailscope.store.clickhouse import ClickHouseStore
from tailscope.store.connection import MISSING_TABLE_ERRORS, Connection, WriterConnection
from tailscope.vocabulary import STAGES

SPAN_KINDS = ("Unspecified", "Internal", "Server", "Client", "Producer", "Consumer")

# Rule numbers that are not positions in stage_rules (see span_tree.sql).
RULE_ATTRIBUTE = -1
RULE_ROOT = 0
RULE_INHERITED = 10_000
RULE_UNMATCHED = 10_001
RULE_TIER_ROOT = 10_002

_FEATURE_DB = "redis|memcached|aerospike|cassandra|scylla|dynamodb|hbase|couchbase|bigtable|feast|tecton"


def default_rules() -> list[StageRule]:
    """The rules a new store is seeded with (semantic conventions first, then span-name rules)."""
    rules = [
        # OpenTelemetry semantic conventions
        (
            "feature_hydration",
            None,
            None,
            rf"^db\.system(\.name)?=({_FEATURE_DB})$",
            "key-value / feature store client (db.system)",
        ),
        (
            "feature_hydration",
            None,
            r"feature|feast|hydrat|online.?store",
            None,
            "feature-store-ish span name",
        ),
        ("queue", None, None, r"^messaging\.", "messaging.* attributes (a queue or broker)"),
        ("queue", "Consumer", None, None, "CONSUMER span (taken off a queue)"),
        ("queue", "Producer", None, None, "PRODUCER span (put on a queue)"),
        (
            "downstream",
            "Client",
            None,
            r"^(http|rpc|url|server|db|net\.peer|network\.peer)\.",
            "CLIENT span with http.*/rpc.*/url.*/db.* attributes (a remote call)",
        ),
        # serving frameworks' own span names. Ray Serve's spans are all SERVER kind in its own export
        # and OTLP: rules that name kind Server apply to them although they nest (see span_tree.sql)
        (
            "queue",
            "Server",
            r"route_to_replica|assign_request|choose_replica",
            None,
            "Ray Serve (SERVER spans): routing to a replica, waiting while every replica is busy",
        ),
        (
            "model_forward",
            "Server",
            r"^replica_handle_request",
            None,
            "Ray Serve (SERVER spans): a replica handling the request (its own code; child spans map)",
        ),
        (
            "queue",
            None,
            r"route_to_replica|assign_request|choose_replica",
            None,
            "Ray Serve: routing to a replica, waiting while every replica is busy",
        ),
        (
            "model_forward",
            None,
            r"^replica_handle_request",
            None,
            "Ray Serve: a replica handling the request (the deployment's code; with child spans, those map)",
        ),
        # span names
        ("parsing", None, r"deserializ|pars(e|ing)|validat|decod", None, "parse / validate / decode"),
        (
            "preprocessing",
            None,
            r"tokeni[sz]|pre.?process|embed|normaliz|resiz",
            None,
            "tokenize / preprocess / embed",
        ),
        (
            "postprocessing",
            None,
            r"post.?process|calibrat|threshold|softmax|top.?k|rerank",
            None,
            "postprocess / calibrate / threshold",
        ),
        (
            "queue",
            None,
            r"queue|batch.?wait|wait.?for.?batch|enqueue|dequeue|scheduler",
            None,
            "queue / batch wait",
        ),
        (
            "model_forward",
            None,
            r"forward|inference|infer|predict|model|generate|onnx|triton|torch",
            None,
            "forward / inference / predict / model",
        ),
        (
            "serialization",
            None,
            r"serializ|encod|render|respon[sd]|marshal",
            None,
            "serialize / encode / render",
        ),
        ("feature_hydration", None, r"lookup|fetch.?features?|cache", None, "lookup / cache"),
        ("ingress", None, r"receive|read.?body|middleware|auth|accept|route", None, "receive / middleware"),
        ("downstream", "Client", None, None, "any other CLIENT span (a remote call)"),
    ]
    return [
        StageRule(
            position=i, stage=stage, span_kind=kind, name_regex=name, attribute_regex=attr, description=text
        )
        for i, (stage, kind, name, attr, text) in enumerate(rules, start=1)
    ]


def rules_from_rows(rows: list[tuple[Any, ...]]) -> list[StageRule]:
    """Stage rules from stage_rules_list rows (position, stage, kind, name, attribute, description)."""
    return [
        StageRule(
            position=r[0],
            stage=r[1],
            span_kind=r[2],
            name_regex=r[3],
            attribute_regex=r[4],
            description=r[5] or "",
        )
        for r in rows
    ]


def _stored_rules(conn: Connection) -> list[StageRule] | None:
    try:
        rows = conn.execute(sql.load("stage_rules_list", dialect_of(conn))).fetchall()
    except MISSING_TABLE_ERRORS:  # a store from before the table existed, opened read-only
        return None
    return rules_from_rows(rows) if rows else None


def rules_in_force(conn: Connection) -> list[StageRule]:
    """The stored rules, or the defaults when the store has none."""
    return _stored_rules(conn) or default_rules()


def list_rules(source: Source) -> list[StageRule]:
    """The rules in force, ordered by position (defaults when the store has none yet)."""
    with reading(source) as conn:
        return rules_in_force(conn)


def validate_rules(source: Source, rules: list[StageRule]) -> list[str]:
    """Problems with a proposed rule list, one sentence each ([] when valid): unknown stage, unknown
    span kind, rule without any condition, regex that RE2 (DuckDB) rejects."""
    problems: list[str] = []
    with reading(source) as conn:
        for number, rule in enumerate(rules, start=1):
            where = f"rule {number}"
            if rule.stage not in STAGES:
                problems.append(f"{where}: unknown stage {rule.stage!r} (one of {', '.join(STAGES)})")
            if rule.span_kind is not None and rule.span_kind not in SPAN_KINDS:
                problems.append(
                    f"{where}: unknown span kind {rule.span_kind!r} (one of {', '.join(SPAN_KINDS)})"
                )
            if not (rule.span_kind or rule.name_regex or rule.attribute_regex):
                problems.append(
                    f"{where}: has no condition (set a span kind, a name regex or an attribute regex)"
                )
            problems += regex_problems(conn, where, "name regex", rule.name_regex)
            problems += regex_problems(conn, where, "attribute regex", rule.attribute_regex)
    return problems


def _store_rules(conn: WriterConnection, rules: list[StageRule]) -> None:
    conn.execute(sql.load("stage_rules_delete"))
    conn.executemany(
        sql.load("stage_rules_insert"),
        [
            [i, r.stage, r.span_kind, r.name_regex, r.attribute_regex, r.description]
            for i, r in enumerate(rules, start=1)
        ],
    )


def seed_rules(conn: WriterConnection) -> None:
    """Store the default rules when the table is empty (a new store)."""
    if conn.execute(sql.load("stage_rules_count")).fetchone()[0] == 0:
        _store_rules(conn, default_rules())


def replace_rules(conn: WriterConnection, rules: list[StageRule]) -> None:
    """Validate, store (renumbering positions 1..n in list order) and recompute the derived tables of
    every run. Takes a writer connection (`with store.writer() as conn:`). Raises ValueError listing
    the problems when invalid; nothing is changed then."""
    problems = validate_rules(conn, rules)
    if problems:
        raise ValueError("invalid stage rules: " + "; ".join(problems))
    from tailscope.analysis.derive import rederive_after

    rederive_after(conn, lambda: _store_rules(conn, rules))


def save_rules(store: Any, rules: list[StageRule]) -> None:
    """replace_rules on either engine (a ClickHouse store: store.ch_write.replace_stage_rules, every
    run derived again inside ClickHouse). Raises ValueError listing the problems; nothing changes
    then."""
    from tailscope.store import ch_write

    save_on_either(store, rules, validate_rules, ch_write.replace_stage_rules, replace_rules, "stage rules")


def stage_case(rules: list[StageRule]) -> tuple[str, str, list[Any]]:
    """SQL pieces for the rules: (name-hit columns over `SpanName`, the rule-number CASE over a span
    joined with its name hits, params in text order: name columns first, then the CASE).

    The CASE yields the position of the first matching rule, or NULL. It reads `SpanKind`,
    `AttrLines` (the span's attributes as "key=value" lines, see span_tree.sql) and the name-hit
    columns `nh1`, `nh2`, ... (one per rule with a name regex). An attribute regex is matched
    against each line (multi-line mode: `^` and `$` are a line's ends), as it was against each
    key=value pair when attributes were a MAP."""
    name_cols: list[str] = []
    name_params: list[Any] = []
    whens: list[str] = []
    case_params: list[Any] = []
    for rule in rules:
        conditions: list[str] = []
        if rule.span_kind is not None:
            conditions.append("SpanKind = ?")
            case_params.append(rule.span_kind)
        if rule.name_regex is not None:
            column = f"nh{len(name_cols) + 1}"
            name_cols.append(f"regexp_matches(SpanName, ?, 'i') AS {column}")
            name_params.append(rule.name_regex)
            conditions.append(column)
        if rule.attribute_regex is not None:
            conditions.append("regexp_matches(AttrLines, ?, 'i')")
            case_params.append("(?m)" + rule.attribute_regex)
        whens.append(f"WHEN {' AND '.join(conditions) or 'false'} THEN {int(rule.position)}")
    names_sql = ", ".join(["SpanName", *name_cols])
    case_sql = "CASE " + " ".join(whens) + " END" if whens else "CAST(NULL AS INTEGER)"
    return names_sql, case_sql, name_params + case_params


def rule_label(
    rule_no: int | None, rules: list[StageRule], phase_rules: list[PhaseRule] | None = None
) -> str:
    """Words for a rule number as span_tree.sql reports it."""
    if rule_no is not None and rule_no >= PHASE_RULE_BASE:
        return phase_rule_label(rule_no, phase_rules or [])
    if rule_no == RULE_ATTRIBUTE:
        return "attribute tailscope.stage"
    if rule_no == RULE_ROOT:
        return "request root"
    if rule_no == RULE_TIER_ROOT:
        return "nested SERVER span (another service's request; its own time unattributed)"
    if rule_no == RULE_INHERITED:
        return "inherited from parent"
    if rule_no == RULE_UNMATCHED or rule_no is None:
        return "no rule matched (child of the root)"
    for rule in rules:
        if rule.position == rule_no:
            parts = []
            if rule.span_kind:
                parts.append(f"kind = {rule.span_kind}")
            if rule.name_regex:
                parts.append(f"name ~ {rule.name_regex}")
            if rule.attribute_regex:
                parts.append(f"attribute ~ {rule.attribute_regex}")
            return f"rule {rule_no}: " + " and ".join(parts)
    return f"rule {rule_no}"


def _ch_mapping(ch_write: Any, store: ClickHouseStore, run: str, sample_traces: int) -> list[tuple[Any, ...]]:
    try:
        return ch_write.stage_mapping(store, run, sample_traces)
    except KeyError:  # no such run: no spans to map
        return []


def stage_mapping(source: Source, run: str | None = None, sample_traces: int = 2000) -> pd.DataFrame:
    """The mapping in force, per distinct span: DataFrame[span_name, span_kind, stage, rule
    (e.g. 'attribute tailscope.stage', 'request root', 'rule 7: name ~ (forward|infer...)',
    'inherited from parent', 'no rule matched (child of the root)'), spans (count)], most frequent
    first. Computed over up to `sample_traces` traces of the run (every run when `run` is None)."""
    from tailscope.query.builders import span_tree_query

    columns = ["span_name", "span_kind", "stage", "rule", "spans"]
    with reading(source) as conn:
        labels = [run] if run is not None else runs_with_spans(conn)
        frames: list[tuple[Any, ...]] = []
        if isinstance(source, ClickHouseStore):  # the span tree inside ClickHouse (query.clickhouse)
            from tailscope.store import ch_write

            rules, phase_rules = ch_write.rules_in_force(source), ch_write.phase_rules_in_force(source)
            frames = [row for label in labels for row in _ch_mapping(ch_write, source, label, sample_traces)]
            labels = []
        else:
            rules, phase_rules = rules_in_force(conn), phase_rules_in_force(conn)
        for label in labels:
            conn.execute(sql.load("derive_drop_scope"))
            conn.execute(sql.load("stage_mapping_scope"), [label, int(sample_traces)])
            try:
                text, params = span_tree_query(rules, scope="traces", run=label, phase_rules=phase_rules)
                summary = sql.load("stage_mapping_summary").replace("{span_tree}", text)
                frames.extend(conn.execute(summary, params).fetchall())
            finally:
                conn.execute(sql.load("derive_drop_scope"))
    if not frames:
        return pd.DataFrame(columns=columns)
    frame = pd.DataFrame(frames, columns=["span_name", "span_kind", "stage", "rule_no", "spans"])
    frame = frame.groupby(["span_name", "span_kind", "stage", "rule_no"], as_index=False)["spans"].sum()
    frame["rule"] = [
        rule_label(int(n) if n is not None else None, rules, phase_rules) for n in frame["rule_no"]
    ]
    return frame.sort_values(["spans", "span_name"], ascending=[False, True])[columns].reset_index(drop=True)
