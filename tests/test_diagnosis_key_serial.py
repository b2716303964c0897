"""Per-key serialization (key_serial.py): the requests of one key are served one at a time (an entity's
mailbox, a hot row's lock, a per-user mutex), so only they wait, for each other; every other key on
the same processes runs normally. Two mechanisms make the same key's spans slow without that chain:
a slow instance (every key on it slow) and a bigger tenant (its work is longer, run side by side).

Hand-built: a quote API on three processes; each request asks an entity (`Entity.ask`, INTERNAL, with
`entity.id` and `tenant.id` attributes), then does its own work."""

from __future__ import annotations

from tailscope.analysis.diagnosis import diagnose_frame
from tests.mechanism_frames import TraceBuilder, lognormal

N, RPS, PROCESSES, KEYS = 3000, 150.0, 3, 300


def quotes(how: str, seed: int = 4) -> TraceBuilder:
    """'key': 20 % of the requests ask entity e-0, whose messages (~20 ms each) are handled one at a
    time wherever they come from; 'instance': api/2 runs every step 8x slower in the run's middle
    third (its CPU starved), keys drawn evenly; 'tenant': tenant t-0's requests (20 %) ask for ~40 ms
    of work each, run side by side."""
    b = TraceBuilder(seed)
    arrivals = b.arrivals(N, RPS)
    lo, hi = float(arrivals[len(arrivals) // 3]), float(arrivals[2 * len(arrivals) // 3])
    free = 0.0  # when e-0's mailbox is next free
    for t in arrivals:
        t = float(t)
        b.new_trace()
        inst = f"api/{int(b.rng.integers(PROCESSES))}"
        slow = 8.0 if how == "instance" and inst == "api/2" and lo <= t < hi else 1.0
        hot = how in ("key", "tenant") and b.rng.random() < 0.2
        key = "e-0" if how == "key" and hot else f"e-{int(b.rng.integers(1, KEYS))}"
        tenant = "t-0" if how == "tenant" and hot else f"t-{int(b.rng.integers(1, 20))}"
        root = b.span(None, "POST /quote", "Server", inst, t, 0.0, service="quote-api")
        began = t + slow * lognormal(b.rng, 1.0, 0.2)
        work = slow * lognormal(b.rng, 2.0, 0.3)
        if how == "key" and hot:
            work = lognormal(b.rng, 20.0, 0.2)
            free = max(free, began) + work
            end = free
        elif how == "tenant" and hot:
            end = began + lognormal(b.rng, 40.0, 0.4)
        else:
            end = began + work
        b.span(root, "Entity.ask", "Internal", inst, began, end - began, service="quote-api",
               **{"entity.id": key, "tenant.id": tenant})
        b.set_end(root, end + slow * lognormal(b.rng, 3.0, 0.2))
    return b


def _found(b: TraceBuilder) -> list[tuple[str, str | None, float]]:
    return [(f.pattern, f.span_name, round(f.confidence, 2)) for f in diagnose_frame(b.frame()).findings]


def test_one_keys_requests_served_one_at_a_time_are_named() -> None:
    """Before: nothing >= 0.5 (the slow asks' shared key was not read)."""
    found = _found(quotes("key"))
    # a lock on the key (its single server held by the request before); a queue of one server per key
    # is the same wait, so queueing is accepted too
    assert found and found[0][0] in ("lock_contention", "queueing") and found[0][2] >= 0.5, found
    assert found[0][1] == "Entity.ask", found


def test_a_slow_instance_is_no_key_of_its_own() -> None:
    found = _found(quotes("instance"))
    assert not [f for f in found if f[0] == "lock_contention" and f[2] >= 0.5], found


def test_a_tenant_with_bigger_work_is_no_chain() -> None:
    """t-0's asks are the slow ones (the tail shares that tenant), but they run side by side: their
    ends come at any spacing, not one service time apart: no wait for each other."""
    found = _found(quotes("tenant"))
    assert not [f for f in found if f[0] in ("lock_contention", "queueing") and f[2] >= 0.5], found


def test_numbers_that_follow_the_durations_are_a_size_not_a_key() -> None:
    """A batch's message count concentrates on the slow spans as a key does (event-enricher
    consumer-backlog: lock_contention 0.29 at `messaging.batch.message_count` before): its order
    follows the durations, an id's does not."""
    import numpy as np

    from tailscope.analysis.diagnosis.key_serial import _size_like

    rng = np.random.default_rng(2)
    count = rng.integers(1, 100, 500)
    took = count * rng.lognormal(0.0, 0.3, 500)
    assert _size_like(count.tolist(), took)
    assert not _size_like(rng.permutation(count).tolist(), took)  # ids: no order in the durations
    assert not _size_like([f"r-{c}" for c in count], took)  # labels are never a size
