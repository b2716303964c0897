"""Stage and phase rules as data: what the store derives with and the dashboard edits.

Below the store in the layers (tailscope.store reads and writes them, tailscope.analysis shows and
validates them), so the store never calls up into the analysis for its rules: a store seeds its
empty rule tables with `default_rules()` / `default_phase_rules()` and derives with the rules it
holds. Engine-free: no SQL here, only the rules, their defaults and their checks.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class StageRule:
    """One row of the ordered `stage_rules` table. All conditions that are set must hold; the first
    matching rule (lowest position) gives the span's stage. Regexes are RE2 (DuckDB), matched
    case-insensitively anywhere in the text unless anchored. `attribute_regex` is matched against
    each span attribute written as `key=value` (e.g. `^db\\.system=(redis|memcached)$`)."""

    position: int
    stage: str
    span_kind: str | None = None  # 'Server' | 'Client' | 'Internal' | 'Producer' | 'Consumer'
    name_regex: str | None = None
    attribute_regex: str | None = None
    description: str = ""


@dataclass(frozen=True)
class PhaseRule:
    """One row of the ordered `phase_rules` table: a phase that a span reports about itself (a
    serving framework's time breakdown), turned into a stage interval under that span.

    `source` 'attribute': `start_key` is an attribute holding the phase's duration in `unit`
    ('s', 'ms', 'us', 'ns', or 'text' for values such as "12.5ms"); the attribute phases of one
    framework on one span are laid end to end in position order from the span's start, or, when a
    phase has `end_key` (an attribute giving, in the same unit, the offset from the span's start at
    which that phase ends, e.g. time to first token for prefill), placed so that it ends there.
    `source` 'events': the phase runs from the span's first event named `start_key` to its first
    event named `end_key` (e.g. Triton's QUEUE_START .. COMPUTE_START).
    `name_regex` (RE2, case-insensitive) restricts the rule to spans whose name matches."""

    position: int
    framework: str
    phase: str
    stage: str
    source: str  # 'attribute' | 'events'
    start_key: str
    end_key: str | None = None
    unit: str | None = None  # attribute rules: 's' | 'ms' | 'us' | 'ns' | 'text'
    name_regex: str | None = None
    description: str = ""
