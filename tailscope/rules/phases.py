"""Phase rules: serving frameworks' own time breakdowns become stage intervals (see
tailscope.analysis.phases). Their defaults, stored form, checks and the per-rule values both
engines' phase_spans.sql bind."""

from __future__ import annotations

from typing import Any

from tailscope.instrument.light import LIGHT_FRAMEWORK, STAGE_END_US, STAGE_US
from tailscope.rules import PhaseRule
from tailscope.rules.stages import RegexCheck, regex_problems
from tailscope.vocabulary import STAGES

SOURCES = ("attribute", "events")
UNITS: dict[str, float | None] = {"s": 1e9, "ms": 1e6, "us": 1e3, "ns": 1.0, "text": None}

# Rule numbers of phase spans in span_tree.sql: PHASE_RULE_BASE + position.
PHASE_RULE_BASE = 20_000

_VLLM = "gen_ai.latency."
_TRITON_EVENTS = (
    # (phase, stage, start event, end event, what it is)
    ("http receive", "ingress", "HTTP_RECV_START", "HTTP_RECV_END", "reading the HTTP request"),
    ("grpc read", "ingress", "GRPC_WAITREAD_START", "GRPC_WAITREAD_END", "reading the gRPC request"),
    ("queue", "queue", "QUEUE_START", "COMPUTE_START", "waiting in the model's scheduler queue"),
    ("input", "preprocessing", "COMPUTE_START", "COMPUTE_INPUT_END", "copying inputs to the backend"),
    ("infer", "model_forward", "COMPUTE_INPUT_END", "COMPUTE_OUTPUT_START", "the backend's inference"),
    ("output", "postprocessing", "COMPUTE_OUTPUT_START", "COMPUTE_END", "collecting the outputs"),
    ("http send", "serialization", "HTTP_SEND_START", "HTTP_SEND_END", "writing the HTTP response"),
    ("grpc send", "serialization", "GRPC_SEND_START", "GRPC_SEND_END", "writing the gRPC response"),
)


# vLLM (vllm/tracing.py SpanAttributes; set on its `llm_request` span, values in seconds, the span
# starting at the request's arrival): queue, then prefill up to the first token, then decode. Arrival
# to queue (tokenizing, input processing) stays with the span.
_VLLM_ATTRIBUTES = (
    # (phase, stage, duration key, end-offset key, what it is)
    ("queue", "queue", "time_in_queue", None,
     "time between the engine queueing the request and scheduling it"),
    ("prefill", "model_forward", "time_in_model_prefill", "time_to_first_token",
     "prefill, ending at the first token"),
    ("decode", "model_forward", "time_in_model_decode", None, "decode, from the first token to the last"),
)
# TGI's router records durations on its `generate` span as text ("12.3ms"): validation, then queue,
# then inference, in that order from the span's start.
_TGI_ATTRIBUTES = (
    # (phase, stage, duration key, what it is)
    ("validation", "preprocessing", "validation_time", "validating and tokenizing the request"),
    ("queue", "queue", "queue_time", "waiting for a batch slot"),
    ("inference", "model_forward", "inference_time", "prefill and decode"),
)


def default_phase_rules() -> list[PhaseRule]:
    """The rules a new store is seeded with, one group per framework."""
    rules: list[dict[str, Any]] = [
        dict(framework="vLLM", phase=phase, stage=stage, source="attribute", start_key=_VLLM + key,
             end_key=end and _VLLM + end, unit="s", description=text)
        for phase, stage, key, end, text in _VLLM_ATTRIBUTES
    ]
    rules += [
        dict(framework="Triton", phase=phase, stage=stage, source="events", start_key=start, end_key=end,
             description=text)
        for phase, stage, start, end, text in _TRITON_EVENTS
    ]
    rules += [
        dict(framework="TGI", phase=phase, stage=stage, source="attribute", start_key=key, unit="text",
             name_regex="^generate", description=text)
        for phase, stage, key, text in _TGI_ATTRIBUTES
    ]
    # TorchServe's metrics log (ingest/torchserve_log.py): the handler's time, ending where the backend's
    # prediction ends; the rest of the prediction stays with the span
    rules.append(
        dict(framework="TorchServe", phase="handler", stage="model_forward", source="attribute",
             start_key="torchserve.HandlerTime", end_key="torchserve.PredictionTime", unit="ms",
             description="the handler: preprocess, inference and postprocess in the backend worker")
    )
    rules += light_phase_rules()
    return [PhaseRule(position=i, **rule) for i, rule in enumerate(rules, start=1)]


def light_phase_rules() -> list[dict[str, Any]]:
    """tailscope.instrument's light mode (tailscope/instrument/light.py): one span per request with
    each stage's own time and end offset as attributes. Each stage is its own group, so each phase is
    placed by its own end offset (the phases of one group are laid end to end)."""
    return [
        dict(
            framework=f"{LIGHT_FRAMEWORK}: {stage}",
            phase=stage,
            stage=stage,
            source="attribute",
            start_key=STAGE_US + stage,
            end_key=STAGE_END_US + stage,
            unit="us",
            description=f"the {stage} stage's own time, ending at its end offset",
        )
        for stage in STAGES
    ]


def phase_rules_from_rows(rows: list[tuple[Any, ...]]) -> list[PhaseRule]:
    """Phase rules from phase_rules_list rows (the rule's fields in order)."""
    return [PhaseRule(*r[:9], description=r[9] or "") for r in rows]


def phase_rule_problems(rules: list[PhaseRule], regex_error: RegexCheck | None = None) -> list[str]:
    """Problems with a proposed phase rule list, one sentence each ([] when valid); name regexes
    checked with `regex_error` (the store's RE2) when given."""
    problems: list[str] = []
    for number, rule in enumerate(rules, start=1):
        where = f"phase rule {number}"
        if rule.stage not in STAGES:
            problems.append(f"{where}: unknown stage {rule.stage!r} (one of {', '.join(STAGES)})")
        if rule.source not in SOURCES:
            problems.append(f"{where}: unknown source {rule.source!r} (one of {', '.join(SOURCES)})")
        if not rule.start_key or not rule.phase or not rule.framework:
            problems.append(f"{where}: framework, phase and start key are required")
        if rule.source == "attribute" and rule.unit not in UNITS:
            problems.append(f"{where}: unit {rule.unit!r} is not one of {', '.join(UNITS)}")
        if rule.source == "events" and not rule.end_key:
            problems.append(f"{where}: an events rule needs an end event")
    if regex_error is not None:
        for number, rule in enumerate(rules, start=1):
            problems += regex_problems(regex_error, f"phase rule {number}", "name regex", rule.name_regex)
    return problems


def attribute_keys(rules: list[PhaseRule]) -> list[str]:
    """Every attribute key the attribute rules read (durations and end offsets), in a fixed order."""
    keys = [key for r in rules if r.source == "attribute" for key in (r.start_key, r.end_key) if key]
    return list(dict.fromkeys(keys))


def attribute_paths(rules: list[PhaseRule]) -> list[str]:
    """The keys of `attribute_keys` as JSON paths (quoted: keys contain dots)."""
    return ['$."' + key.replace("\\", "\\\\").replace('"', '\\"') + '"' for key in attribute_keys(rules)]


def phase_rules_param(rules: list[PhaseRule]) -> list[dict[str, Any]]:
    """The rules as phase_spans.sql's list-of-structs parameter."""
    at = {key: i for i, key in enumerate(attribute_keys(rules), start=1)}
    return [
        {
            "pos": r.position,
            "grp": r.framework,
            "phase": r.phase,
            "stage": r.stage,
            "source": r.source,
            "start_key": r.start_key,
            "end_key": r.end_key,
            "factor": UNITS.get(r.unit or "") if r.source == "attribute" else None,
            "name_regex": r.name_regex,
            "start_at": at.get(r.start_key) if r.source == "attribute" else None,
            "end_at": at.get(r.end_key or "") if r.source == "attribute" else None,
        }
        for r in rules
    ]
