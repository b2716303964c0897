"""Stage rules and phase rules as the editable tables of the Stage mapping page, and back: one column
per rule field, the position as `order`."""

from __future__ import annotations

import dataclasses
import math
from typing import TypeVar

import pandas as pd

from tailscope.analysis import PhaseRule, StageRule

Rule = TypeVar("Rule", StageRule, PhaseRule)


def _columns(kind: type) -> list[str]:
    return ["order", *[f.name for f in dataclasses.fields(kind)][1:]]


RULE_COLUMNS = _columns(StageRule)
PHASE_COLUMNS = _columns(PhaseRule)


def _frame(rules: list[Rule], kind: type[Rule]) -> pd.DataFrame:
    rows = [[float(r.position), *dataclasses.astuple(r)[1:]] for r in rules]
    return pd.DataFrame(rows, columns=_columns(kind))


def _text(value: object) -> str | None:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    text = str(value).strip()
    return text or None


def _from_frame(frame: pd.DataFrame, kind: type[Rule]) -> list[Rule]:
    """Edited rows back into rules, sorted by `order` (rows without one go last), positions 1..n;
    a field without a value is None where the rule's field may be None, else ""."""
    columns = _columns(kind)
    optional = {f.name for f in dataclasses.fields(kind) if f.default is None}
    ordered = frame.assign(_row=range(len(frame))).sort_values(["order", "_row"], na_position="last")
    rules: list[Rule] = []
    for row in ordered[columns].itertuples(index=False):
        values = {k: _text(v) for k, v in zip(columns, row, strict=True) if k != "order"}
        if all(v is None for v in values.values()):
            continue  # an empty row the editor added
        fields = {k: v if k in optional else v or "" for k, v in values.items()}
        rules.append(kind(position=len(rules) + 1, **fields))
    return rules


def rules_frame(rules: list[StageRule]) -> pd.DataFrame:
    return _frame(rules, StageRule)


def rules_from_frame(frame: pd.DataFrame) -> list[StageRule]:
    return _from_frame(frame, StageRule)


def phase_rules_frame(rules: list[PhaseRule]) -> pd.DataFrame:
    return _frame(rules, PhaseRule)


def phase_rules_from_frame(frame: pd.DataFrame) -> list[PhaseRule]:
    return _from_frame(frame, PhaseRule)
