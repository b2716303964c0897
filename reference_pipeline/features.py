"""Feature hydration: a real feature store behind an in-process TTL + LRU cache.

`SqliteFeatureStore` (the embedded default) generates a SQLite file on start: an `entities` table of
per-entity profile columns and an `events` table of ~`events_per_entity` transactions per entity,
indexed by entity. A lookup is one profile read plus one aggregate over the entity's events (count,
sum, mean, max, recency), the way an online store computes windowed features. Each thread gets its
own connection (sqlite3 connections must not be shared across threads).

`RedisFeatureStore` (when `--redis-url` is given) keeps the same 16 features per entity as a hash
`tailscope:features:<id>`, loaded on start; `redis` is imported only then.

`RemoteLatency` simulates the network round trip of a remote feature store (a managed online store
or a Redis across the network, where every miss is a request over the wire). It is a configured
delay, drawn from a log-normal, and is used only when the config asks for it (the cold-cache and
key-expiry scenarios, whose planted cause is misses against such a store); the local SQLite file
itself answers in well under a millisecond, which is not what a miss costs in production.

`FeatureCache` is an LRU (OrderedDict) whose entries expire after a TTL. `jitter` spreads expiry
times; `fill(..., jitter=0)` inserts every key at once with one TTL, which is how the key-expiry
scenario makes a whole cache expire together. The cache lives on the event-loop thread only, so it
needs no lock.
"""

from __future__ import annotations

import random
import sqlite3
import threading
import time
from collections import OrderedDict
from pathlib import Path

import numpy as np

N_FEATURES = 16
COUNTRIES = ("de", "fr", "us", "gb", "br", "in", "jp", "ng", "mx", "pl")


def entity_id(index: int) -> str:
    return f"ent-{index:06d}"


class SqliteFeatureStore:
    db_system = "sqlite"

    def __init__(
        self, path: Path, n_entities: int = 5000, events_per_entity: int = 24, seed: int = 11
    ) -> None:
        self.path = Path(path)
        self.n_entities = n_entities
        self._local = threading.local()
        self._generate(n_entities, events_per_entity, seed)

    def _generate(self, n_entities: int, events_per_entity: int, seed: int) -> None:
        """Draw the tables with numpy and insert them in two executemany calls (drawn value by value
        with `random`, 120k events took 0.45 s of CPU at every service start; this takes 0.26 s)."""
        rng = np.random.default_rng(seed)
        self.path.unlink(missing_ok=True)
        conn = sqlite3.connect(self.path)
        conn.executescript(
            """
            PRAGMA journal_mode = WAL;
            PRAGMA synchronous = OFF;  -- generated scratch data: no fsync while it is written
            CREATE TABLE entities (id TEXT PRIMARY KEY, country TEXT, age_days INTEGER, tier INTEGER,
                                   risk_score REAL, verified INTEGER, devices INTEGER);
            CREATE TABLE events (entity_id TEXT, ts REAL, amount REAL, kind INTEGER, declined INTEGER);
            """
        )
        ids = [entity_id(i) for i in range(n_entities)]
        conn.executemany(
            "INSERT INTO entities VALUES (?, ?, ?, ?, ?, ?, ?)",
            zip(
                ids,
                [COUNTRIES[c] for c in rng.integers(0, len(COUNTRIES), n_entities).tolist()],
                rng.integers(1, 3651, n_entities).tolist(),
                rng.integers(0, 4, n_entities).tolist(),
                rng.random(n_entities).tolist(),
                (rng.random(n_entities) < 0.8).tolist(),
                rng.integers(1, 7, n_entities).tolist(),
                strict=True,
            ),
        )
        per_entity = rng.integers(events_per_entity // 2, events_per_entity * 3 // 2 + 1, n_entities)
        n_events = int(per_entity.sum())
        owners = np.repeat(np.arange(n_entities), per_entity).tolist()
        conn.executemany(
            "INSERT INTO events VALUES (?, ?, ?, ?, ?)",
            zip(
                [ids[i] for i in owners],
                (time.time() - rng.exponential(86400 * 7, n_events)).tolist(),
                rng.lognormal(3, 1.2, n_events).tolist(),
                rng.integers(0, 5, n_events).tolist(),
                (rng.random(n_events) < 0.05).tolist(),
                strict=True,
            ),
        )
        conn.execute("CREATE INDEX events_by_entity ON events (entity_id, ts)")
        conn.commit()
        conn.close()

    def _conn(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._local.conn = sqlite3.connect(self.path)
        return conn

    def get(self, key: str) -> list[float] | None:
        conn = self._conn()
        profile = conn.execute(
            "SELECT country, age_days, tier, risk_score, verified, devices FROM entities WHERE id = ?", (key,)
        ).fetchone()
        if profile is None:
            return None
        now = time.time()
        agg = conn.execute(
            """
            SELECT count(*), coalesce(sum(amount), 0), coalesce(avg(amount), 0), coalesce(max(amount), 0),
                   coalesce(max(ts), 0), coalesce(sum(declined), 0),
                   coalesce(sum(CASE WHEN ts > ? THEN 1 ELSE 0 END), 0),
                   coalesce(sum(CASE WHEN ts > ? THEN amount ELSE 0 END), 0),
                   count(DISTINCT kind)
            FROM events WHERE entity_id = ?
            """,
            (now - 86400, now - 7 * 86400, key),
        ).fetchone()
        country, age_days, tier, risk, verified, devices = profile
        count, total, mean, biggest, last_ts, declined, last_day, week_amount, kinds = agg
        return [
            COUNTRIES.index(country) / len(COUNTRIES),
            age_days / 3650,
            tier / 3,
            risk,
            float(verified),
            devices / 6,
            count / 40,
            total / 1e3,
            mean / 100,
            biggest / 500,
            min((now - last_ts) / 86400, 30) / 30,
            declined / max(count, 1),
            last_day / 10,
            week_amount / 1e3,
            kinds / 5,
            1.0,
        ]


class RedisFeatureStore:
    db_system = "redis"

    def __init__(self, url: str, source: SqliteFeatureStore) -> None:
        import redis  # optional dependency: only with --redis-url

        self.client = redis.Redis.from_url(url)
        pipe = self.client.pipeline(transaction=False)
        for i in range(source.n_entities):
            key = entity_id(i)
            pipe.hset(f"tailscope:features:{key}", mapping={str(j): v for j, v in enumerate(source.get(key))})
        pipe.execute()

    def get(self, key: str) -> list[float] | None:
        raw = self.client.hgetall(f"tailscope:features:{key}")
        if not raw:
            return None
        return [float(raw[str(j).encode()]) for j in range(N_FEATURES)]


class RemoteLatency:
    """Simulated network round trip of a remote feature store: log-normal, `median_ms` and `sigma`
    (0.5: p99 ≈ 3.2 × the median). `draw()` returns seconds; the caller waits that long per miss and
    records it on the span (`tailscope.injected_delay_ms`), so the wait is never mistaken for work."""

    def __init__(self, median_ms: float, sigma: float = 0.5, seed: int = 29) -> None:
        self.median_s, self.sigma = median_ms / 1000, sigma
        self._rng = random.Random(seed)

    def draw(self) -> float:
        return self.median_s * self._rng.lognormvariate(0.0, self.sigma)


class FeatureCache:
    """LRU with per-entry TTL. `get` returns None on a miss or an expired entry."""

    def __init__(
        self, capacity: int, ttl_s: float, jitter: float = 0.1, seed: int = 3, clock=time.monotonic
    ) -> None:
        self.capacity, self.ttl_s, self.jitter = capacity, ttl_s, jitter
        self._clock = clock
        self._rng = random.Random(seed)
        self._entries: OrderedDict[str, tuple[float, list[float]]] = OrderedDict()
        self.hits = self.misses = self.evictions = self.expirations = 0

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: str) -> list[float] | None:
        entry = self._entries.get(key)
        if entry is not None:
            expires_at, value = entry
            if self._clock() < expires_at:
                self._entries.move_to_end(key)
                self.hits += 1
                return value
            del self._entries[key]
            self.expirations += 1
        self.misses += 1
        return None

    def put(self, key: str, value: list[float], jitter: float | None = None) -> None:
        spread = self.jitter if jitter is None else jitter
        ttl = self.ttl_s * (1 + self._rng.uniform(-spread, spread)) if spread else self.ttl_s
        self._entries[key] = (self._clock() + ttl, value)
        self._entries.move_to_end(key)
        while len(self._entries) > self.capacity:
            self._entries.popitem(last=False)
            self.evictions += 1

    def fill(self, store, keys: list[str], jitter: float | None = None) -> None:
        for key in keys:
            value = store.get(key)
            if value is not None:
                self.put(key, value, jitter)
