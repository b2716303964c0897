"""Phase rules: serving frameworks' own time breakdowns become stage intervals.

Most teams do not write a span per stage; their serving framework records where a request's time
went, on one span: vLLM as `gen_ai.latency.*` duration attributes, Triton (OpenTelemetry mode and
its own trace file) as timestamped events, TGI as duration fields of its `generate` span. A phase
rule says where one phase is reported and which stage it is; sql/phase_spans.sql turns every phase
it finds into a synthetic child span of the reporting span, which span_tree.sql walks like any
other child. What the framework does not account for stays with the span itself.

The rules are data (tailscope.rules.phases; the store's phase rule table, seeded with
`default_phase_rules()`), shown and editable on the Stage mapping page like the stage rules; sources
and field meanings are cited in ARCHITECTURE.md ("Serving frameworks").
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tailscope.analysis.source import Source, reading
from tailscope.rules import PhaseRule
from tailscope.rules.phases import PHASE_RULE_BASE, SOURCES, UNITS, default_phase_rules, phase_rule_problems

__all__ = ["SOURCES", "UNITS", "default_phase_rules", "list_phase_rules", "save_phase_rules"]


def list_phase_rules(source: Source) -> list[PhaseRule]:
    """The phase rules in force, ordered by position (defaults when the store has none yet)."""
    with reading(source) as reader:
        return reader.phase_rules()


def validate_phase_rules(source: Source, rules: list[PhaseRule]) -> list[str]:
    """Problems with a proposed phase rule list, one sentence each ([] when valid)."""
    with reading(source) as reader:
        return phase_rule_problems(rules, reader.regex_error)


def save_phase_rules(
    store: Any, rules: list[PhaseRule], progress: Callable[[float, str], None] | None = None
) -> None:
    """Store an edited phase rule list and derive every run again with it (the store validates
    first). Raises ValueError naming the problems; nothing changes then."""
    store.replace_phase_rules(rules, progress)


def phase_rule_label(rule_no: int, rules: list[PhaseRule]) -> str:
    """Words for a phase span's rule number, e.g. 'phase rule 2 (vLLM): attribute gen_ai...'."""
    position = rule_no - PHASE_RULE_BASE
    for rule in rules:
        if rule.position == position:
            what = (
                f"events {rule.start_key} .. {rule.end_key}"
                if rule.source == "events"
                else f"attribute {rule.start_key} ({rule.unit})"
            )
            return f"phase rule {position} ({rule.framework}): {what}"
    return f"phase rule {position}"
