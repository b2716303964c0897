"""One palette for the whole dashboard: every stage keeps its colour on every chart."""

from __future__ import annotations

from tailscope.vocabulary import ALL_STAGES

# Vega's "tableau10", colour-blind friendly enough and readable on white; `unattributed` is grey.
STAGE_COLORS: dict[str, str] = dict(
    zip(
        ALL_STAGES,
        (
            "#4C78A8",  # ingress
            "#F58518",  # queue
            "#B279A2",  # parsing
            "#E45756",  # feature_hydration
            "#72B7B2",  # preprocessing
            "#54A24B",  # model_forward
            "#EECA3B",  # postprocessing
            "#9D755D",  # downstream
            "#FF9DA6",  # serialization
            "#BAB0AC",  # unattributed
        ),
        strict=True,
    )
)
OTHER_STAGE = "#79706E"

BODY = "#4C78A8"
TAIL = "#E45756"
TOTAL = "#2F3E4E"
TARGET = "#B22222"
P50_LINE = "#1F77B4"
P99_LINE = "#D62728"
CRITICAL = "#111111"
NEUTRAL = "#9AA5B1"

# Percentile rank of a span among spans of the same name: low = typical, high = slow.
RANK_SCALE = [[0.0, "#D9EAF7"], [0.5, "#FDD49E"], [0.9, "#FC8D59"], [1.0, "#B30000"]]
HEAT_SCALE = "Viridis"


def stage_color(stage: str) -> str:
    """The colour of a stage; stages outside the canonical list share one grey."""
    return STAGE_COLORS.get(stage, OTHER_STAGE)
