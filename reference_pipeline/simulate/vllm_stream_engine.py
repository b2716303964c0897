"""The vLLM side of the blind family `vllm-stream` (vllm_stream.py): continuous-batching engines, one per GPU
replica, behind a least-outstanding-requests router.

An engine runs one step at a time. Without chunked prefill a step is either a prefill (the waiting requests
admitted together, cost growing with their uncached prompt tokens and quadratically with their length) or a
decode step (one token for every running sequence; time growing with the batch and its total KV length).
With chunked prefill every step decodes all running sequences and spends what is left of a 512-token budget
on prompt chunks, oldest first. A request is admitted only when the KV cache has room for its prompt; when a
decode step finds no room for the batch's next tokens, the youngest running sequences are preempted
(recompute: their KV is dropped, they go back to the head of the waiting queue and prefill prompt + output
so far again). Per-tenant system prompts are prefix-cached: a hit skips their prefill; a prefix no running
sequence holds is evicted once the free pool's turnover (free tokens / tokens freed per second) is shorter
than the time since its tenant's last use. LoRA adapters: at most 4 on the GPU; a request for another
adapter waits until a slot's adapter has no running sequence, then for its load (from host memory, or from
disk when the host-memory LRU of 4 evicted it too); the load runs inside the step: every stream waits.

Tokens leave the engine at the end of each step and reach the client through the API server's event loop
(detokenization + the SSE write, CPU per token growing with the output's length): when the loop is slower
than the engine, delivery lags behind the steps.
"""

from __future__ import annotations

import heapq
import math
import random
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from reference_pipeline.simulate.trace_table import NS_PER_MS, NS_PER_S

CHUNK_BUDGET = 512
MAX_BATCHED_TOKENS = 32768  # without chunking: at least max_model_len
MAX_SEQS = 128
MAX_LORAS = 4
MAX_CPU_LORAS = 4  # vLLM's default: as many as the GPU slots


@dataclass
class Seq:
    rid: int
    arrive: float  # ns, at the engine
    prompt: int  # prompt tokens, the tenant's system prompt included
    shared: int  # of which the tenant's system prompt (prefix-cacheable)
    out: int  # tokens it will generate
    tenant: int
    adapter: int | None
    gen: int = 0
    need: int = 0  # tokens still to prefill in this admission
    kv: int = 0  # KV tokens it holds (its own: the shared prefix is counted once per replica)
    seg: int = -1  # tick of its first decode token in the current run of decodes
    version: int = 0
    first_sched: float | None = None
    first_step: int = -1
    done_step: int = -1
    segments: list[tuple[int, int]] = field(default_factory=list)
    preemptions: int = 0
    cached: int = 0  # prefix tokens served from the cache at its first admission
    prefill_ns: float = 0.0
    prefilling: bool = False


@dataclass
class EngineConfig:
    chunked: bool
    kv_tokens: int
    detok_ms: float  # API loop CPU per token (at output length 0)
    detok_per_len_ms: float  # ... plus this per token already generated
    churn_tok_s: float = 15_000.0  # free-pool turnover (tokens/s) from finished requests' blocks


def prefill_ms(chunks: list[tuple[int, int]]) -> float:
    """(tokens computed, context before them) per sequence: linear in tokens + attention over context."""
    return 4.0 + sum(0.015 * n + 0.4e-6 * n * (ctx + n) for n, ctx in chunks)


def decode_ms(batch: int, kv: int) -> float:
    return 6.0 + 0.09 * batch + 0.03 * kv / 1000.0


class Replica:
    def __init__(self, index: int, cfg: EngineConfig, rng: random.Random) -> None:
        self.index, self.cfg, self.rng = index, cfg, rng
        self.t = 0.0
        self.waiting: deque[Seq] = deque()
        self.running: list[Seq] = []  # admission order: the youngest last
        self.used = 0
        self.step_end: list[float] = []
        self.step_tokens: list[int] = []
        self.step_len: list[int] = []  # sum of output lengths of the tokens emitted (detok cost)
        self.tick_step: list[int] = []
        self.finish: list[tuple[int, int, int, Seq]] = []
        self.prefix_touch: dict[int, float] = {}
        self.loaded: dict[int, float] = {}  # adapter -> last use (GPU slots)
        self.host: dict[int, float] = {}  # adapter -> last use (host-memory LRU)
        self.slow: tuple[float, float] | None = None  # (warm from, time constant): a cold process
        self.overhead: list[tuple[float, float, float]] = []  # (from, to, extra ms per step)
        self.extra_churn: list[tuple[float, float, float, int]] = []  # (from, to, tok/s, kv held)
        self.outstanding = 0
        self.tenant_running: dict[int, int] = {}
        self.dec_sum = 0  # sum of (gen - seg) over the decoding sequences: output length at a tick
        self.done: list[Seq] = []

    # -- state -------------------------------------------------------------------------------------
    def busy(self) -> bool:
        return bool(self.waiting or self.running)

    def _kv_cap(self, t: float) -> int:
        if not self.extra_churn:
            return self.cfg.kv_tokens
        return self.cfg.kv_tokens - sum(h for a, b, _, h in self.extra_churn if a <= t < b)

    def _cost(self, t: float, ms: float) -> float:
        if self.overhead:
            ms += sum(x for a, b, x in self.overhead if a <= t < b)
        if self.slow is not None and t >= self.slow[0]:
            ms *= 1.0 + 2.0 * math.exp(-(t - self.slow[0]) / self.slow[1])
        return ms * NS_PER_MS * self.rng.lognormvariate(0.0, 0.04)

    def _prefix_hit(self, seq: Seq, t: float) -> bool:
        if self.tenant_running.get(seq.tenant):
            return True  # a running sequence holds the prefix's blocks: not evictable
        last = self.prefix_touch.get(seq.tenant)
        if last is None:
            return False
        churn = self.cfg.churn_tok_s
        if self.extra_churn:
            churn += sum(c for a, b, c, _ in self.extra_churn if a <= t < b)
        horizon = max(self._kv_cap(t) - self.used, 1000) / churn * NS_PER_S
        return t - last < horizon

    # -- admission ---------------------------------------------------------------------------------
    def _adapter_ok(self, seq: Seq, t: float, admitted: set[int]) -> tuple[bool, float]:
        """Whether the sequence's adapter is (or can be made) resident; the load time (ms)."""
        a = seq.adapter
        if a is None or a in self.loaded:
            if a is not None:
                self.loaded[a] = t
            return True, 0.0
        busy = {s.adapter for s in self.running if s.adapter is not None} | admitted
        if len(self.loaded) >= MAX_LORAS:
            idle = [x for x in self.loaded if x not in busy]
            if not idle:
                return False, 0.0
            del self.loaded[min(idle, key=self.loaded.__getitem__)]
        self.loaded[a] = t
        if a in self.host:  # pinned in host memory: a copy over PCIe
            self.host[a] = t
            return True, 35.0 * self.rng.lognormvariate(0.0, 0.25)
        if len(self.host) >= MAX_CPU_LORAS:
            del self.host[min(self.host, key=self.host.__getitem__)]
        self.host[a] = t
        return True, 420.0 * self.rng.lognormvariate(0.0, 0.3)  # read + pin the safetensors first

    def _admit(self, t: float, budget: int) -> tuple[list[Seq], float]:
        """Waiting sequences admitted now (FCFS; one whose adapter cannot be resident is skipped)."""
        out: list[Seq] = []
        load_ms = 0.0
        admitted: set[int] = set()
        cap = self._kv_cap(t)
        skipped: list[Seq] = []
        while self.waiting and budget > 0 and len(self.running) + len(out) < MAX_SEQS:
            seq = self.waiting[0]
            if seq.arrive > t:
                break
            if seq.need == 0:  # a fresh admission or a recompute after preemption
                hit = self._prefix_hit(seq, t)
                seq.need = seq.prompt - seq.shared + seq.gen + (0 if hit else seq.shared)
                if seq.first_sched is None:
                    seq.cached = seq.shared if hit else 0
            if self.used + seq.prompt - seq.shared + seq.gen + 64 > cap:
                break  # no KV blocks for its prompt: everything behind it waits too
            if not self.cfg.chunked and seq.need > budget and out:
                break
            ok, load = self._adapter_ok(seq, t, admitted)
            if not ok:
                skipped.append(self.waiting.popleft())
                continue
            self.waiting.popleft()
            load_ms += load
            if seq.adapter is not None:
                admitted.add(seq.adapter)
            seq.kv = seq.prompt - seq.shared + seq.gen
            self.used += seq.kv
            self.prefix_touch[seq.tenant] = t
            self.tenant_running[seq.tenant] = self.tenant_running.get(seq.tenant, 0) + 1
            if seq.first_sched is None:
                seq.first_sched = t
            seq.prefilling = True
            out.append(seq)
            budget -= seq.need
        for seq in reversed(skipped):
            self.waiting.appendleft(seq)
        return out, load_ms

    # -- one step ----------------------------------------------------------------------------------
    def step(self) -> None:
        t = self.t
        if not self.running and self.waiting:
            t = max(t, self.waiting[0].arrive)
        decoders = [s for s in self.running if not s.prefilling]
        prefill_chunks: list[tuple[int, int]] = []
        finishing_prefill: list[Seq] = []
        load_ms = 0.0
        if self.cfg.chunked:
            decoders = self._make_room(decoders, t)
            budget = CHUNK_BUDGET - len(decoders)
            for seq in [s for s in self.running if s.prefilling]:
                budget = self._chunk(seq, budget, prefill_chunks, finishing_prefill)
            if budget > 0:
                new, load_ms = self._admit(t, budget)
                self.running += new
                for seq in new:
                    budget = self._chunk(seq, budget, prefill_chunks, finishing_prefill)
            ms = (decode_ms(len(decoders), self.used) if decoders else 0.0) + (
                prefill_ms(prefill_chunks) if prefill_chunks else 0.0)
        else:
            new, load_ms = self._admit(t, MAX_BATCHED_TOKENS) if self.waiting else ([], 0.0)
            if new:
                self.running += new
                for seq in new:
                    prefill_chunks.append((seq.need, seq.prompt + seq.gen - seq.need))
                    seq.need = 0
                    finishing_prefill.append(seq)
                decoders = []
                ms = prefill_ms(prefill_chunks)
            else:
                decoders = self._make_room(decoders, t)
                ms = decode_ms(len(decoders), self.used)
        if not decoders and not prefill_chunks:  # everything preempted or blocked: wait for arrivals
            self.t = t + 2 * NS_PER_MS
            return
        end = t + self._cost(t, ms + load_ms)
        k = len(self.step_end)
        self.step_end.append(end)
        tokens = len(decoders) + len(finishing_prefill)
        self.step_tokens.append(tokens)
        tick = len(self.tick_step)
        self.step_len.append(self.dec_sum + tick * len(decoders) if decoders else 0)
        for seq in finishing_prefill:
            seq.prefilling = False
            seq.prefill_ns += end - t
            if seq.first_step < 0:
                seq.first_step = k
            seq.gen += 1  # a prefill samples the next token
            self.used += 1
            seq.kv += 1
            seq.seg = len(self.tick_step) + (1 if decoders else 0)
            self.dec_sum += seq.gen - seq.seg
            if seq.gen >= seq.out:
                self._retire(seq, k, seq.seg)
            else:
                heapq.heappush(self.finish, (seq.seg + seq.out - seq.gen - 1, seq.version, seq.rid, seq))
        if decoders:
            self.tick_step.append(k)
            self.used += len(decoders)
            while self.finish and self.finish[0][0] <= tick:
                _, version, _, seq = heapq.heappop(self.finish)
                if version == seq.version and seq.done_step < 0:
                    self._retire(seq, k, tick + 1)
        self.t = end

    def _chunk(self, seq: Seq, budget: int, chunks: list[tuple[int, int]], finishing: list[Seq]) -> int:
        n = min(seq.need, budget)
        if n <= 0:
            return budget
        done_before = seq.prompt + seq.gen - seq.need
        chunks.append((n, done_before))
        seq.need -= n
        if seq.need == 0:
            finishing.append(seq)
        return budget - n

    def _make_room(self, decoders: list[Seq], t: float) -> list[Seq]:
        """Preempt the youngest running sequences until the batch's next tokens fit (recompute)."""
        cap = self._kv_cap(t)
        while decoders and self.used + len(decoders) > cap:
            victim = self.running[-1]
            self.running.pop()
            tick = len(self.tick_step)
            if not victim.prefilling:
                self.dec_sum -= victim.gen - victim.seg
                made = tick - victim.seg
                victim.gen += made
                victim.kv += made
                if made > 0:
                    victim.segments.append((victim.seg, made))
                decoders = [s for s in decoders if s is not victim]
            self.used -= victim.kv
            victim.kv, victim.need, victim.prefilling = 0, 0, False
            victim.version += 1
            victim.preemptions += 1
            self.tenant_running[victim.tenant] -= 1
            self.prefix_touch[victim.tenant] = t
            self.waiting.appendleft(victim)
        return decoders

    def _retire(self, seq: Seq, k: int, tick_end: int) -> None:
        made = tick_end - seq.seg
        if made > 0:
            seq.segments.append((seq.seg, made))
        self.dec_sum -= seq.gen - seq.seg
        seq.kv += made
        seq.gen = seq.out
        seq.done_step = k
        self.running.remove(seq)
        self.used -= seq.kv
        self.tenant_running[seq.tenant] -= 1
        self.prefix_touch[seq.tenant] = self.step_end[k]
        self.outstanding -= 1
        self.done.append(seq)

    # -- delivery ----------------------------------------------------------------------------------
    def delivered(self) -> np.ndarray:
        """When each step's tokens leave the API server (its event loop: detokenize + SSE write)."""
        out = []
        free = 0.0
        c0, c1 = self.cfg.detok_ms * NS_PER_MS, self.cfg.detok_per_len_ms * NS_PER_MS
        for end, n, length in zip(self.step_end, self.step_tokens, self.step_len, strict=True):
            free = max(end, free) + 0.15 * NS_PER_MS + c0 * n + c1 * length
            out.append(free)
        return np.asarray(out)

    def token_times(self, seq: Seq, delivered: np.ndarray, ticks: np.ndarray) -> np.ndarray:
        """Delivery time of each of the sequence's tokens (first from its prefill, then per tick)."""
        steps = [np.array([seq.first_step])] + [ticks[a : a + n] for a, n in seq.segments]
        return delivered[np.concatenate(steps)[: seq.out]]
