"""Analysis: stage mapping and the pure functions behind every view, over any store (tailscope.store)."""

from tailscope.analysis.breakdown import stage_breakdown
from tailscope.analysis.compare import compare
from tailscope.analysis.costs import RunCosts, cost_per_1k, run_costs
from tailscope.analysis.llm import llm_latency
from tailscope.analysis.phases import (
    default_phase_rules,
    list_phase_rules,
    save_phase_rules,
    validate_phase_rules,
)
from tailscope.analysis.stages import (
    default_rules,
    list_rules,
    save_rules,
    stage_mapping,
    validate_rules,
)
from tailscope.analysis.tail import tail_vs_body
from tailscope.analysis.trace import trace_gantt
from tailscope.analysis.types import (
    BAND_QUANTILES,
    BANDS,
    DEFAULT_LATENCY_TARGET_MS,
    Band,
    Comparison,
    Filter,
    Gantt,
    Heatmap,
    Overview,
    PhaseRule,
    Rect,
    RunCost,
    RunSummary,
    StageBar,
    StageComparison,
    StageRule,
    TailVsBody,
    Waterfall,
)
from tailscope.analysis.views import (
    filter_options,
    heatmap,
    list_runs,
    overview,
    select_requests,
    slowest_traces,
    time_range,
    waterfall,
)

__all__ = [
    "BANDS",
    "BAND_QUANTILES",
    "DEFAULT_LATENCY_TARGET_MS",
    "Band",
    "Comparison",
    "Filter",
    "Gantt",
    "Heatmap",
    "Overview",
    "PhaseRule",
    "Rect",
    "RunCost",
    "RunCosts",
    "RunSummary",
    "StageBar",
    "StageComparison",
    "StageRule",
    "TailVsBody",
    "Waterfall",
    "compare",
    "cost_per_1k",
    "default_phase_rules",
    "default_rules",
    "filter_options",
    "heatmap",
    "list_phase_rules",
    "list_rules",
    "list_runs",
    "llm_latency",
    "overview",
    "run_costs",
    "save_phase_rules",
    "save_rules",
    "select_requests",
    "slowest_traces",
    "stage_breakdown",
    "stage_mapping",
    "tail_vs_body",
    "time_range",
    "trace_gantt",
    "validate_phase_rules",
    "validate_rules",
    "waterfall",
]
