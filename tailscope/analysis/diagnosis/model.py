"""What a detector returns (`Finding`) and what every detector is handed (`Context`)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from tailscope.analysis.diagnosis.frame import KIND_CLIENT, NO_STAGE, TraceFrame
from tailscope.analysis.diagnosis.stats import TailSplit, excess_share, per_request_sum, tail_split
from tailscope.vocabulary import ALL_STAGES


@dataclass
class Finding:
    """One named cause of the tail.

    evidence: {"summary": one human sentence with the numbers, "stats": machine fields (floats, ints,
    strings), "chart": data for the evidence chart ({"kind": ..., series...}, at most a few thousand
    points)}. confidence: see ARCHITECTURE.md "Diagnosis" for how it is calibrated.
    """

    pattern: str
    confidence: float
    stage: str | None
    span_name: str | None
    evidence: dict[str, Any]
    advice: str

    def to_dict(self, with_chart: bool = True) -> dict[str, Any]:
        out = asdict(self)
        out["confidence"] = round(float(self.confidence), 3)
        if not with_chart:
            out["evidence"] = {k: v for k, v in self.evidence.items() if k != "chart"}
        return out


@dataclass
class Context:
    """Shared, lazily computed views of a frame: the tail split and who carries the tail excess."""

    frame: TraceFrame
    seed: int = 0
    notes: dict[str, Any] = field(default_factory=dict)  # detectors leave facts for each other here

    @cached_property
    def rng(self) -> np.random.Generator:
        return np.random.default_rng(self.seed)

    @cached_property
    def split(self) -> TailSplit:
        return tail_split(self.frame.requests.latency)

    @property
    def n_requests(self) -> int:
        return len(self.frame.requests)

    @cached_property
    def name_stage(self) -> np.ndarray:
        return self.frame.name_stage()

    @cached_property
    def name_share(self) -> np.ndarray:
        """Per span name: share of the tail excess carried by that name's exclusive time."""
        f = self.frame
        sp = self.split
        k = len(f.names)
        if sp.excess_ns <= 0 or not sp.tail.any() or not sp.body.any():
            return np.zeros(k)
        req = f.request
        ok = req >= 0
        in_tail = ok & sp.tail[np.maximum(req, 0)]
        in_body = ok & sp.body[np.maximum(req, 0)]
        t = np.bincount(f.name[in_tail], weights=f.excl[in_tail], minlength=k) / sp.tail.sum()
        b = np.bincount(f.name[in_body], weights=f.excl[in_body], minlength=k) / sp.body.sum()
        return (t - b) / sp.excess_ns

    def per_request(self, mask: np.ndarray, values: np.ndarray | None = None) -> np.ndarray:
        f = self.frame
        return per_request_sum(f.request, f.excl if values is None else values, mask, self.n_requests)

    def share_of(self, mask: np.ndarray, values: np.ndarray | None = None) -> float:
        return excess_share(self.per_request(mask, values), self.split)

    def stage_of_name(self, code: int) -> str | None:
        s = int(self.name_stage[code])
        return ALL_STAGES[s] if s != NO_STAGE else None

    def span_stage_mask(self, stage: str) -> np.ndarray:
        return self.frame.stage == ALL_STAGES.index(stage)

    @cached_property
    def client_names(self) -> np.ndarray:
        """Span names that are mostly CLIENT spans inside requests (calls to other services)."""
        f = self.frame
        inside = f.request >= 0
        total = np.bincount(f.name[inside], minlength=len(f.names))
        client = np.bincount(f.name[inside & (f.kind == KIND_CLIENT)], minlength=len(f.names))
        return np.nonzero((total > 0) & (client * 2 > total))[0]
