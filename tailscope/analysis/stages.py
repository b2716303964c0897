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

The rules are data (tailscope.rules.stages); each engine makes them one SQL CASE with every regex and
stage as a bound parameter, evaluating name regexes once per distinct span name, not once per span
(sql/span_tree.sql, sql/clickhouse/span_tree_1_spans.sql).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pandas as pd

from tailscope.analysis.phases import phase_rule_label
from tailscope.analysis.runs import runs_with_spans
from tailscope.analysis.source import Source, reading
from tailscope.rules import PhaseRule, StageRule
from tailscope.rules.phases import PHASE_RULE_BASE
from tailscope.rules.stages import (
    RULE_ATTRIBUTE,
    RULE_INHERITED,
    RULE_ROOT,
    RULE_TIER_ROOT,
    RULE_UNMATCHED,
    SPAN_KINDS,
    default_rules,
    stage_rule_problems,
)

__all__ = ["SPAN_KINDS", "default_rules", "list_rules", "rule_label", "save_rules", "stage_mapping"]


def list_rules(source: Source) -> list[StageRule]:
    """The rules in force, ordered by position (defaults when the store has none yet)."""
    with reading(source) as reader:
        return reader.stage_rules()


def validate_rules(source: Source, rules: list[StageRule]) -> list[str]:
    """Problems with a proposed rule list, one sentence each ([] when valid): unknown stage, unknown
    span kind, rule without any condition, regex that RE2 (the store's engine) rejects."""
    with reading(source) as reader:
        return stage_rule_problems(rules, reader.regex_error)


def save_rules(
    store: Any, rules: list[StageRule], progress: Callable[[float, str], None] | None = None
) -> None:
    """Store an edited rule list and derive every run again with it (the store validates first).
    Raises ValueError listing the problems; nothing changes then."""
    store.replace_stage_rules(rules, progress)


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


def stage_mapping(
    source: Source, run: str | None = None, sample_traces: int = 2000, window: tuple[int, int] | None = None
) -> pd.DataFrame:
    """The mapping in force, per distinct span: DataFrame[span_name, span_kind, stage, rule
    (e.g. 'attribute tailscope.stage', 'request root', 'rule 7: name ~ (forward|infer...)',
    'inherited from parent', 'no rule matched (child of the root)'), spans (count)], most frequent
    first. Computed over up to `sample_traces` traces of the run (every run when `run` is None), with a
    span starting in `window` (first, end) ns where given."""
    columns = ["span_name", "span_kind", "stage", "rule", "spans"]
    with reading(source) as reader:
        labels = [run] if run is not None else runs_with_spans(reader)
        rules, phase_rules = reader.stage_rules(), reader.phase_rules()
        frames = [row for label in labels for row in reader.stage_mapping(label, sample_traces, window)]
    if not frames:
        return pd.DataFrame(columns=columns)
    frame = pd.DataFrame(frames, columns=["span_name", "span_kind", "stage", "rule_no", "spans"])
    frame = frame.groupby(["span_name", "span_kind", "stage", "rule_no"], as_index=False)["spans"].sum()
    frame["rule"] = [
        rule_label(int(n) if n is not None else None, rules, phase_rules) for n in frame["rule_no"]
    ]
    return frame.sort_values(["spans", "span_name"], ascending=[False, True])[columns].reset_index(drop=True)
