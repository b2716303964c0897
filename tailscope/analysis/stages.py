"""Stage mapping: every span gets one canonical stage (tailscope.vocabulary.STAGES).

Order of precedence, first hit wins:
1. the span's explicit `tailscope.stage` attribute, when it names a canonical stage;
2. the request root span is `ingress` (its own self time is reported as `unattributed`);
3. the ordered rules of the `stage_rules` table (data, editable; seeded with DEFAULT_RULES);
4. otherwise the parent's stage (a child of a `model.forward` span is model_forward), except that an
   unmatched direct child of the request root is `unattributed`.
"""

from __future__ import annotations

import pandas as pd

from tailscope.analysis.source import Source
from tailscope.analysis.types import StageRule

DEFAULT_RULES: tuple[StageRule, ...] = ()  # filled in below the API (see implementation)


def default_rules() -> list[StageRule]:
    """The rules a new store is seeded with (semantic conventions first, then span-name rules)."""
    raise NotImplementedError


def list_rules(source: Source) -> list[StageRule]:
    """The rules in force, ordered by position (defaults when the store has none yet)."""
    raise NotImplementedError


def validate_rules(source: Source, rules: list[StageRule]) -> list[str]:
    """Problems with a proposed rule list, one sentence each ([] when valid): unknown stage, unknown
    span kind, rule without any condition, regex that RE2 (DuckDB) rejects."""
    raise NotImplementedError


def replace_rules(conn, rules: list[StageRule]) -> None:
    """Validate, store (renumbering positions 1..n in list order) and recompute the derived tables of
    every run. Takes a writer connection (`with store.writer() as conn:`). Raises ValueError listing
    the problems when invalid; nothing is changed then."""
    raise NotImplementedError


def reset_rules(conn) -> None:
    """Put the default rules back and recompute every run."""
    raise NotImplementedError


def stage_mapping(source: Source, run: str | None = None) -> pd.DataFrame:
    """The mapping in force, per distinct span: DataFrame[span_name, span_kind, stage, rule
    (e.g. 'attribute tailscope.stage', 'request root', 'rule 7: name ~ (forward|infer...)',
    'inherited from parent', 'unmatched child of the root'), spans (count)], most frequent first."""
    raise NotImplementedError
