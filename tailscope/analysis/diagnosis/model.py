"""What a detector returns (`Finding`) and what every detector is handed (`Context`)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from tailscope.analysis.diagnosis.frame import KIND_CLIENT, KIND_PRODUCER, NO_STAGE, TraceFrame
from tailscope.analysis.diagnosis.stats import TailSplit, excess_share, per_request_sum, tail_split
from tailscope.vocabulary import ALL_STAGES

NAMED = 0.5  # a finding at or above it names a cause; below it, a possible one
# a finding whose mechanism's own signature its detector found absent: a possible cause at most
# (the detector caps at it and records why in stats["signature_absent"]; calibration.gate holds it there)
SIGNATURE_CAP = 0.45


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
    share: float | None = None  # of the run's tail excess, as reported (see shares.py); None: not a cause

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
        return tail_split(self.frame.requests.latency, self.frame.requests.weight)

    @cached_property
    def reported_pauses(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The runtime's reported GC pauses as (instance, start, end), by instance then start: the
        episode form `gc_pause.stall_overlap` takes."""
        f = self.frame
        order = np.lexsort((f.gc_time, f.gc_instance))
        return f.gc_instance[order], f.gc_time[order], f.gc_time[order] + f.gc_dur[order]

    @property
    def n_requests(self) -> int:
        return len(self.frame.requests)

    @cached_property
    def batching(self) -> tuple[np.ndarray, np.ndarray]:
        """Per span name: the share of its spans that share their exact interval with another span of
        the name on the same instance (batched work: one forward serving several requests), and the
        share that share only their end (a batch queue: members leave together when the batch closes)."""
        f = self.frame
        k = len(f.names)
        ok = (f.request >= 0) & self.open_stage  # only names the mapping left open
        if ok.sum() < 2:
            return np.zeros(k), np.zeros(k)

        def shared(cols: list[np.ndarray]) -> np.ndarray:
            keys = [c[ok] for c in cols]
            order = np.lexsort(keys[::-1])
            same = np.ones(len(order) - 1, bool)
            for key in keys:
                ks = key[order]
                same &= ks[1:] == ks[:-1]
            # a span is shared when it equals its sorted neighbour on either side
            multi_sorted = np.r_[same, False] | np.r_[False, same]
            multi = np.empty(len(order), bool)
            multi[order] = multi_sorted
            total = np.bincount(f.name[ok], minlength=k)
            return np.bincount(f.name[ok], weights=multi, minlength=k) / np.maximum(total, 1)

        both = shared([f.instance, f.name, f.start, f.end])
        end_only = np.maximum(shared([f.instance, f.name, f.end]) - both, 0)
        return both, end_only

    @cached_property
    def open_stage(self) -> np.ndarray:
        """Per span: the mapping knows nothing of it: no stage, or `unattributed` below the request
        root (a name no rule matched, under the root: the mapping's default, not a judgement)."""
        f = self.frame
        unattributed = ALL_STAGES.index("unattributed")
        is_root = np.zeros(len(f), bool)
        is_root[f.requests.root] = True
        return (f.stage == NO_STAGE) | ((f.stage == unattributed) & ~is_root)

    @cached_property
    def stage(self) -> np.ndarray:
        """Per span: the mapped stage; where the mapping knows nothing, batched work counts as
        model_forward and a batch queue as queue (inferred from timing, see `batching`)."""
        f = self.frame
        stage = f.stage.copy()
        unknown = self.open_stage
        if unknown.any():
            both, end_only = self.batching
            inferred = np.full(len(f.names), NO_STAGE)
            inferred[end_only >= 0.3] = ALL_STAGES.index("queue")
            inferred[both >= 0.3] = ALL_STAGES.index("model_forward")
            inferred[self._batch_waiters(both >= 0.3)] = ALL_STAGES.index("queue")
            guess = inferred[f.name[unknown]]
            stage[unknown] = np.where(guess >= 0, guess, stage[unknown])
        return stage

    def _batch_waiters(self, batched: np.ndarray) -> np.ndarray:
        """Span names the mapping knows nothing of whose spans mostly (≥ 50 %) hold a child of batched
        work (`batching`: one run shared by several requests) and spend most of their own time before
        it: a request waits there for its batch to run (the batch starts when it is full or its timeout
        passes, not when this request came), so that time is a batch queue's wait, not work."""
        f = self.frame
        out = np.zeros(len(f.names), bool)
        child = np.nonzero((f.parent >= 0) & batched[f.name] & (f.request >= 0))[0]
        if len(child) == 0:
            return out
        parent = f.parent[child]
        keep = self.open_stage[parent] & ~batched[f.name[parent]]
        child, parent = child[keep], parent[keep]
        if len(child) == 0:
            return out
        # each parent's first batched child: the wait is the time from the parent's start to it
        order = np.lexsort((f.start[child], parent))
        first = np.r_[True, parent[order][1:] != parent[order][:-1]]
        child, parent = child[order][first], parent[order][first]
        before = (f.start[child] - f.start[parent]).astype(np.float64)
        k = len(f.names)
        total = np.bincount(f.name[self.open_stage & (f.request >= 0)], minlength=k)
        held = np.bincount(f.name[parent], minlength=k)
        wait = np.bincount(f.name[parent], weights=before, minlength=k)
        own = np.bincount(f.name[parent], weights=f.excl[parent].astype(np.float64), minlength=k)
        return (held >= 0.5 * np.maximum(total, 1)) & (held > 0) & (wait >= 0.5 * own) & (own > 0)

    @cached_property
    def name_stage(self) -> np.ndarray:
        """The most common stage of each span name (NO_STAGE where none is known)."""
        f = self.frame
        out = np.full(len(f.names), NO_STAGE, np.int64)
        known = self.stage >= 0
        if known.any():
            flat = f.name[known] * len(ALL_STAGES) + self.stage[known]
            counts = np.bincount(flat, minlength=len(f.names) * len(ALL_STAGES)).reshape(len(f.names), -1)
            has = counts.sum(axis=1) > 0
            out[has] = counts[has].argmax(axis=1)
        return out

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
        return self.stage == ALL_STAGES.index(stage)

    @cached_property
    def client_names(self) -> np.ndarray:
        """Span names that are mostly CLIENT spans inside requests (calls to other services)."""
        f = self.frame
        inside = f.request >= 0
        total = np.bincount(f.name[inside], minlength=len(f.names))
        client = np.bincount(f.name[inside & (f.kind == KIND_CLIENT)], minlength=len(f.names))
        return np.nonzero((total > 0) & (client * 2 > total))[0]

    @cached_property
    def send_names(self) -> np.ndarray:
        """Span names that are mostly PRODUCER spans inside requests, ended inside their parent: a send
        to a broker that the request waited for (an async producer's send() returns once the record is in
        its buffer; a full buffer blocks it until the broker acknowledges enough: the broker's latency,
        reaching the caller). A send that ends after its parent was not waited for (fire and forget)."""
        f = self.frame
        sent = (f.request >= 0) & (f.kind == KIND_PRODUCER) & (f.parent >= 0)
        total = np.bincount(f.name[f.request >= 0], minlength=len(f.names))
        p = f.parent[sent]
        inside = np.zeros(len(f), bool)
        inside[np.nonzero(sent)[0]] = f.start[sent] + f.dur[sent] <= f.start[p] + f.dur[p]
        held = np.bincount(f.name[inside], minlength=len(f.names))
        return np.nonzero((total > 0) & (held * 2 > total))[0]
