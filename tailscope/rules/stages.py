"""The stage rules' defaults, their stored form and their checks (see tailscope.analysis.stages for
how a span gets its stage)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tailscope.rules import StageRule
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
    return [StageRule(*r[:5], description=r[5] or "") for r in rows]


RegexCheck = Callable[[str], "str | None"]  # a pattern -> None, or why the engine's RE2 refuses it


def regex_problems(regex_error: RegexCheck, where: str, label: str, pattern: str | None) -> list[str]:
    """[] when `pattern` is unset or a regex the store's RE2 accepts, else one sentence saying why not."""
    if pattern is None:
        return []
    if pattern == "":
        return [f"{where}: empty {label} (leave it unset instead)"]
    why = regex_error(pattern)
    return [] if why is None else [f"{where}: {label} {pattern!r} is not a valid RE2 regex ({why})"]


def stage_rule_problems(rules: list[StageRule], regex_error: RegexCheck) -> list[str]:
    """Problems with a proposed rule list, one sentence each ([] when valid): unknown stage, unknown
    span kind, rule without any condition, regex that RE2 (`regex_error`: the store's) rejects."""
    problems: list[str] = []
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
        problems += regex_problems(regex_error, where, "name regex", rule.name_regex)
        problems += regex_problems(regex_error, where, "attribute regex", rule.attribute_regex)
    return problems
