"""Stage rules and phase rules as the editable tables of the Stage mapping page, and back."""

from __future__ import annotations

import math

import pandas as pd

from tailscope.analysis import PhaseRule, StageRule

RULE_COLUMNS = ["order", "stage", "span_kind", "name_regex", "attribute_regex", "description"]


def rules_frame(rules: list[StageRule]) -> pd.DataFrame:
    return pd.DataFrame(
        [
            [float(r.position), r.stage, r.span_kind, r.name_regex, r.attribute_regex, r.description]
            for r in rules
        ],
        columns=RULE_COLUMNS,
    )


def _text(value: object) -> str | None:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    text = str(value).strip()
    return text or None


def rules_from_frame(frame: pd.DataFrame) -> list[StageRule]:
    """Edited rows back into rules, sorted by `order` (rows without one go last), positions 1..n."""
    ordered = frame.assign(_row=range(len(frame))).sort_values(["order", "_row"], na_position="last")
    rules: list[StageRule] = []
    for row in ordered[RULE_COLUMNS].itertuples(index=False):
        values = dict(zip(RULE_COLUMNS, row, strict=True))
        if all(_text(v) is None for k, v in values.items() if k != "order"):
            continue  # an empty row the editor added
        position = len(rules) + 1
        rules.append(
            StageRule(
                position=position,
                stage=_text(values["stage"]) or "",
                span_kind=_text(values["span_kind"]),
                name_regex=_text(values["name_regex"]),
                attribute_regex=_text(values["attribute_regex"]),
                description=_text(values["description"]) or "",
            )
        )
    return rules


PHASE_COLUMNS = [
    "order",
    "framework",
    "phase",
    "stage",
    "source",
    "start_key",
    "end_key",
    "unit",
    "name_regex",
    "description",
]


def phase_rules_frame(rules: list[PhaseRule]) -> pd.DataFrame:
    return pd.DataFrame(
        [
            [
                float(r.position),
                r.framework,
                r.phase,
                r.stage,
                r.source,
                r.start_key,
                r.end_key,
                r.unit,
                r.name_regex,
                r.description,
            ]
            for r in rules
        ],
        columns=PHASE_COLUMNS,
    )


def phase_rules_from_frame(frame: pd.DataFrame) -> list[PhaseRule]:
    """Edited phase rule rows back into rules, sorted by `order`, positions 1..n."""
    ordered = frame.assign(_row=range(len(frame))).sort_values(["order", "_row"], na_position="last")
    rules: list[PhaseRule] = []
    for row in ordered[PHASE_COLUMNS].itertuples(index=False):
        values = {k: _text(v) for k, v in zip(PHASE_COLUMNS, row, strict=True) if k != "order"}
        if all(v is None for v in values.values()):
            continue  # an empty row the editor added
        rules.append(
            PhaseRule(
                position=len(rules) + 1,
                framework=values["framework"] or "",
                phase=values["phase"] or "",
                stage=values["stage"] or "",
                source=values["source"] or "",
                start_key=values["start_key"] or "",
                end_key=values["end_key"],
                unit=values["unit"],
                name_regex=values["name_regex"],
                description=values["description"] or "",
            )
        )
    return rules
