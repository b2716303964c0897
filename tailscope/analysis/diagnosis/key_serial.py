"""lock_contention on one key: requests that share a key value are served one at a time.

Mechanism. Some work is serialized per key, not per process: an actor's mailbox (one entity handles
one message at a time), a hot row's lock, a partition's single consumer, a per-user mutex. Only the
requests that carry the same key wait, and they wait for each other: each one's service starts when
the previous one's ends, so its span (which starts when it asked) ends one service time after the
previous span of that key ended. The wait grows with that key's arrival rate, wherever the requests
run; requests for every other key on the same processes run normally. It is a lock on the key (the
resource is the key's single server, held by the request before), not the process's capacity: more
workers or replicas do not shorten it, a finer key or less work per request under it does.

Statistic. Per span name inside requests that carries >= MIN_SHARE of the tail excess with a heavy
tail (its slow spans: over its p90, 3x its median and 1 ms more), every attribute key with at least
MIN_VALUES distinct values (a key, whatever its name; not numbers whose order follows the
durations, SIZE_RHO: a batch's size, a count) is read: the value most common among the slow
spans, its share there (`slow_share`) and among all spans (`all_share`). A key value the slow spans
share far more than the fast ones (slow_share >= 0.4, lift >= 3) is a candidate, and its spans,
sorted by end, are read as one server's: each span's own part is its end less the later of its start
and the previous span's end (the service time where it waited). One server: those parts are never
near zero (`tiny`: the share under a quarter of their median, ~0 for a serial server, a seventh or
more for spans that ran side by side and only overlap), and a waiting span's own part is as long as
a span of the key that did not wait (`service_to_alone` near 1; not read where fewer than MIN_ALONE
did not wait); spans that ran side by side end at the spacing of their arrivals, shorter. The
negatives this keeps out: a slow instance (its slow spans share no key value beyond the instance, and
the key's other values on that instance are slow too: `others_slow`), a slow tenant or a bigger
request (slow because the work is bigger: its spans overlap and end at any spacing, shorter than the
work each does: no back-to-back chain).

confidence = CAP x logistic(slow_share, 0.4, 0.08) x logistic(1 - tiny, 0.85, 0.04) x
logistic(-|ln service_to_alone|, -0.4, 0.1) x material_weight(share of the tail excess in the waits).
"""

from __future__ import annotations

import numpy as np

from tailscope.analysis.diagnosis.attributes import text_codes
from tailscope.analysis.diagnosis.model import Context, Finding
from tailscope.analysis.diagnosis.stats import clamp01, logistic, material_weight, spearman
from tailscope.analysis.diagnosis.where import main_service

PATTERN = "lock_contention"
MECHANISM = "requests of one key served one at a time"
CAP = 0.9
MIN_SHARE = 0.05
MIN_SPANS = 100
MIN_SLOW = 20
MIN_VALUES = 5
MIN_KEY_SPANS = 20
SIZE_RHO = 0.3  # numeric values this rank-correlated with the durations are a size, not a key
MIN_ALONE = 5  # spans of the key that did not wait: enough to read one service from
LIFT = 3.0
ADVICE = (
    "Requests for one key ('{key}' = {value}) are served one at a time and wait for each other: each "
    "one's span ends one service time after the previous one of that key ended, while every other key "
    "runs normally. The key's single server is the resource: an actor's or entity's mailbox, a hot "
    "row's lock, a partition's one consumer, a per-user mutex. More replicas or threads do not help. "
    "Shorten the work done under the key (answer reads from a replica or a snapshot of its state, move "
    "slow work out of the handler), split the hot key (shard the entity, a finer lock, more partitions "
    "for its traffic), coalesce or batch its requests, or shed them when its queue is long."
)


def _slow(d: np.ndarray) -> np.ndarray:
    med = float(np.median(d))
    return (d > np.quantile(d, 0.9)) & (d >= 3 * med) & (d - med >= 1e6)


def _chain(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The spans of one key as one server's, sorted by end: (own part, whether it waited) per span."""
    o = np.argsort(end, kind="stable")
    s, e = start[o].astype(np.float64), end[o].astype(np.float64)
    prev = np.r_[-np.inf, np.maximum.accumulate(e)[:-1]]
    return e - np.maximum(s, prev), s < prev


def _size_like(values: list, durations: np.ndarray) -> bool:
    """Numbers whose order follows the spans' durations (a batch's size, a count): the work's size,
    not a key (an id's order says nothing of its duration)."""
    try:
        x = np.array([float(v) for v in values])
    except (TypeError, ValueError):
        return False
    return bool(np.isfinite(x).all()) and abs(spearman(x, durations)) >= SIZE_RHO


def _candidate(spans: np.ndarray, slow: np.ndarray, idx: np.ndarray, values: list,
               durations: np.ndarray) -> tuple | None:
    """(the key value the slow spans share, its spans (frame indices), slow_share, all_share) or None."""
    pos = np.searchsorted(spans, idx)
    ok = (pos < len(spans)) & (spans[np.minimum(pos, len(spans) - 1)] == idx)
    if ok.sum() < MIN_SPANS:
        return None
    pos = pos[ok]
    kept = np.empty(len(values), dtype=object)
    kept[:] = values
    kept = kept[ok]
    uniq, code = text_codes(kept)
    if len(uniq) < MIN_VALUES or _size_like(kept, durations[pos]):
        return None
    sl = slow[pos]
    if sl.sum() < MIN_SLOW:
        return None
    counts = np.bincount(code[sl], minlength=len(uniq))
    top = int(np.argmax(counts))
    slow_share = counts[top] / sl.sum()
    all_share = float(np.mean(code == top))
    if slow_share < 0.4 or slow_share < LIFT * all_share or np.sum(code == top) < MIN_KEY_SPANS:
        return None
    return str(uniq[top]), spans[pos[code == top]], float(slow_share), all_share


def detect(ctx: Context) -> list[Finding]:
    f = ctx.frame
    if ctx.n_requests < 100:
        return []
    inside = f.request >= 0
    counts = np.bincount(f.name[inside], minlength=len(f.names))
    best: Finding | None = None
    for code in np.nonzero(counts >= MIN_SPANS)[0].tolist():
        spans = np.nonzero(inside & (f.name == code))[0]
        d = f.dur[spans].astype(np.float64)
        slow = _slow(d)
        if slow.sum() < MIN_SLOW:
            continue
        mask = np.zeros(len(f), bool)
        mask[spans[slow]] = True
        if ctx.share_of(mask, f.dur.astype(np.float64) - float(np.median(d))) < MIN_SHARE:
            continue
        for key, (idx, values) in f.attributes(code).items():
            found = _candidate(spans, slow, np.asarray(idx), values, d)
            if found is None:
                continue
            value, keyed, slow_share, all_share = found
            own, waited = _chain(f.start[keyed], f.end[keyed])
            by_end = keyed[np.argsort(f.end[keyed], kind="stable")]  # own's order
            kd = f.dur[by_end].astype(np.float64)
            if waited.sum() < MIN_SLOW:
                continue
            service = float(np.median(own[waited]))
            tiny = float(np.mean(own[waited] < 0.25 * service))
            wait = kd - own
            wait_share = float(wait.sum() / max(kd.sum(), 1.0))
            # one server: a waiting span's own part is one service, as long as a span that did not wait
            # (where nearly every span waited, there is nothing to compare: the parts' spacing alone)
            alone = (~waited).sum() >= MIN_ALONE
            ratio = service / max(float(np.median(kd[~waited])), 1.0) if alone else 1.0
            # the key's other values on the same instances: slow too where the instance is the cause
            where_ = np.isin(f.instance[spans], np.unique(f.instance[keyed]))
            other = where_ & ~np.isin(spans, keyed)
            others_slow = float(slow[other].mean()) if other.any() else 0.0
            key_slow = float(np.isin(keyed, spans[slow]).mean())
            if others_slow >= 0.5 * key_slow:
                continue
            wmask = np.zeros(len(f), bool)
            wmask[keyed] = True
            per_span = np.zeros(len(f))
            per_span[by_end] = wait
            share = ctx.share_of(wmask, per_span)
            confidence = (CAP * logistic(slow_share, 0.4, 0.08) * logistic(1.0 - tiny, 0.85, 0.04)
                          * logistic(-abs(float(np.log(max(ratio, 1e-6)))), -0.4, 0.1)
                          * material_weight(share))
            if best is not None and confidence <= best.confidence:
                continue
            name = f.names[code]
            service_name = main_service(f, keyed)
            stats = {"service": service_name, "key": key, "value": value, "key_spans": len(keyed),
                     "slow_share": round(slow_share, 3), "all_share": round(all_share, 3),
                     "waited": round(float(waited.mean()), 3), "service_ms": round(service / 1e6, 3),
                     "tiny_parts": round(tiny, 3), "service_to_alone": round(ratio, 3),
                     "wait_share": round(wait_share, 3),
                     "others_slow": round(others_slow, 3), "tail_excess_share": round(min(share, 1.0), 3),
                     "mechanism": MECHANISM}
            summary = (
                f"{slow_share:.0%} of the slow '{name}' spans carry {key} = {value} (against {all_share:.0%} "
                f"of all of them), and that key's spans end one after another like one server's: each "
                f"ends about {service / 1e6:.1f} ms after the previous one ended ({tiny:.0%} sooner than a "
                f"quarter of that), so {wait_share:.0%} of their time is waiting for the requests before "
                f"them on the same key; the key's other values on the same instances are slow "
                f"{others_slow:.0%} of the time. The waits carry {share:.0%} of the tail excess."
            )
            best = Finding(PATTERN, clamp01(confidence), ctx.stage_of_name(code), name,
                           {"summary": summary, "stats": stats}, ADVICE.format(key=key, value=value))
    return [best] if best is not None and best.confidence >= 0.05 else []
