"""The phones and their links for the blind family `mobile-edge` (mobile_edge.py): who taps "tag this
photo" when, on which link, and what TCP, TLS and the resolver do to the time it takes.

- Sessions: a user opens the app and tags a few photos, switching out to the Camera between most of
  them (the app goes to the background meanwhile). Sessions start as a Poisson process; actions inside a
  session follow at log-normal gaps. A phone is one install: its platform, region, link, carrier and
  clock offset are fixed for the run.
- Links: Wi-Fi (RTT ~25 ms, tens of Mbit/s up) or cellular (RTT 40-300 ms, a few to ~30 Mbit/s up).
  An upload first ramps TCP's window from 10 segments (~1.5x per round trip with delayed ACKs; Linux,
  Android's kernel, restarts slow start after idle, iOS keeps a warm connection's window), then
  runs at the lower of the link's rate and what loss allows (Mathis: MSS/RTT * 1.22/sqrt(p)). Most lost
  segments are repaired by fast retransmit (that throughput cost); a loss the sender cannot detect from
  duplicate ACKs (the tail of a flight, a small window) waits for the retransmission timeout: RTO =
  max(200 ms, RTT + 4 RTTVAR), doubled for each consecutive loss of the retransmission. A lost SYN
  waits the initial 1 s RTO (then 2 s, ...).
- Connections: URLSession / OkHttp keep a connection to the edge while the app is in the foreground; a
  short background keeps it, a long one (the OS suspends the app) or 60 s idle (the edge's idle
  timeout) loses it, and the next action resolves the name again (the OS cache keeps answers for
  the record's 20 s TTL: the CDN steers by DNS), connects (1 RTT) and handshakes TLS 1.3 (1 RTT +
  both sides' CPU).
- DNS: a cached answer costs a millisecond; otherwise a query to the carrier's (or the home router's)
  resolver: a round trip plus the resolver's own work (a recursion on its cache misses). A query that
  gets no answer is sent again after the platform's timeout: 5 s on Android's resolver (Private DNS in
  opportunistic mode, DNS-over-TLS to the network's resolver), 1 s on iOS.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from reference_pipeline.simulate.trace_table import NS_PER_MS, NS_PER_S, lognormal_ms

PLATFORMS = ("ios", "android")
CARRIERS = ("Vireo Mobile", "Castor Telecom", "Northwind Wireless")
MSS = 1400
IDLE_TIMEOUT_NS = 60 * NS_PER_S  # the edge closes idle client connections
DNS_TTL_NS = 20 * NS_PER_S  # the CDN steers by DNS: short TTLs
_IOS_MODELS = ("iPhone15,2", "iPhone15,4", "iPhone14,5", "iPhone16,1", "iPhone13,2", "iPhone17,3")
_ANDROID_MODELS = (("samsung", "SM-S911B"), ("samsung", "SM-A546B"), ("Google", "Pixel 8"),
                   ("Xiaomi", "23078PND5G"), ("samsung", "SM-G991B"), ("Google", "Pixel 6a"))


@dataclass
class Phone:
    ident: int
    platform: str
    region: int
    cellular: bool
    carrier: int  # the carrier of its SIM (on Wi-Fi: the home network's resolver is used)
    manufacturer: str
    model: str
    os_version: str
    skew_ns: float  # its clock minus the true time: every client timestamp carries it
    rtt_ms: float
    up_mbps: float
    slow_cpu: float  # older phones compress and parse slower
    ip: str
    conn_until: float = -1.0  # the connection to the edge is usable until then (true ns)
    dns_until: float = -1.0  # the OS resolver cache holds the edge's address until then


def make_phone(rng: random.Random, ident: int, regions: int, wifi_share: float) -> Phone:
    platform = "ios" if rng.random() < 0.45 else "android"
    cellular = rng.random() >= wifi_share
    if platform == "ios":
        manufacturer, model = "Apple", rng.choice(_IOS_MODELS)
        os_version = rng.choice(("17.6.1", "18.1", "18.1.1", "18.2"))
    else:
        manufacturer, model = rng.choice(_ANDROID_MODELS)
        os_version = rng.choice(("13", "14", "14", "15"))
    coverage = rng.gauss(0.0, 1.0)  # poor coverage: a longer RTT and a slower uplink together
    if cellular:
        rtt = min(300.0, max(40.0, 80.0 * math.exp(0.4 * coverage) * rng.lognormvariate(0.0, 0.2)))
        up = min(50.0, max(4.0, 13.0 * math.exp(-0.4 * coverage) * rng.lognormvariate(0.0, 0.25)))
    else:
        rtt = min(120.0, max(8.0, 22.0 * math.exp(0.35 * coverage) * rng.lognormvariate(0.0, 0.2)))
        up = min(200.0, max(6.0, 40.0 * math.exp(-0.4 * coverage) * rng.lognormvariate(0.0, 0.3)))
    skew = rng.gauss(0.0, 120.0)
    if rng.random() < 0.06:  # a phone whose clock is far off (no network time for days, manual setting)
        skew = rng.choice((-1.0, 1.0)) * rng.uniform(300.0, 900.0)
    ip = f"100.{64 + rng.randrange(60)}.{rng.randrange(256)}.{1 + rng.randrange(254)}"
    return Phone(ident, platform, rng.randrange(regions), cellular, rng.randrange(len(CARRIERS)),
                 manufacturer, model, os_version, skew * NS_PER_MS, rtt, up,
                 rng.lognormvariate(0.0, 0.25), ip)


@dataclass(frozen=True)
class Action:
    at: float  # true ns the user taps "tag"
    phone: int
    backgrounded_ns: float  # how long the app was in the background just before (0: it was not)
    first: bool  # the session's first action (the app was just opened)


def sessions(rng: random.Random, rps: float, requests: int, regions: int, wifi_share: float,
             ) -> tuple[list[Phone], list[Action]]:
    """The first `requests` actions from t = 0 of sessions that started from 60 s before (stationary).
    A phone is drawn (from its own stream) only for a session with an action in the run."""
    mean_actions = 4.0
    rate = rps / mean_actions
    phones: list[Phone] = []
    actions: list[Action] = []
    t = -60.0
    horizon = requests / rps * 1.6 + 5.0
    while t < horizon:
        t += rng.expovariate(rate)
        mine: list[tuple[float, float, bool]] = []
        at, away, first = t, 0.0, True
        while True:
            if at >= 0.0:
                mine.append((at, away, first))
            if rng.random() < 1.0 / mean_actions:
                break
            gap = 14.0 * rng.lognormvariate(0.0, 0.6)
            away = gap * rng.uniform(0.6, 0.9) if rng.random() < 0.85 else 0.0  # out to the Camera
            at, first = at + gap, False
        if mine:
            phone = make_phone(random.Random(rng.getrandbits(64)), len(phones), regions, wifi_share)
            phones.append(phone)
            actions += [Action(a * NS_PER_S, phone.ident, b * NS_PER_S, f) for a, b, f in mine]
    actions.sort(key=lambda a: a.at)
    return phones, actions[:requests]


# --- what the network does to a request --------------------------------------------------------------

def rto_ns(rng: random.Random, rtt_ms: float, loss: float, floor_ms: float = 200.0) -> float:
    """One retransmission timeout (doubling while the retransmission is lost too)."""
    rto = max(floor_ms, rtt_ms * 2.2) * NS_PER_MS
    total = rto
    while rng.random() < loss and total < 30 * NS_PER_S:
        rto *= 2.0
        total += rto
    return total


def connect_ns(rng: random.Random, phone: Phone, loss: float) -> tuple[float, int]:
    """TCP's handshake (a lost SYN: the 1 s initial RTO) and TLS 1.3's (1 RTT, the certificate check
    on the phone, the edge's ECDHE + signature); (ns, retransmissions)."""
    rtt = phone.rtt_ms * NS_PER_MS
    total, retrans = rtt * rng.lognormvariate(0.0, 0.15), 0
    while rng.random() < loss:  # the SYN or its SYN-ACK lost: initial RTO 1 s, doubling
        total += NS_PER_S * 2 ** retrans
        retrans += 1
    total += rtt * rng.lognormvariate(0.0, 0.15) + lognormal_ms(rng, 3.0, 0.3) * phone.slow_cpu
    total += lognormal_ms(rng, 0.8, 0.3)
    for _ in range(3):  # the handshake's flights: a loss there is a tail loss (nothing behind it)
        if rng.random() < loss:
            total += rto_ns(rng, phone.rtt_ms, loss)
            retrans += 1
    return total, retrans


def dns_ns(rng: random.Random, phone: Phone, cached: bool, drop: float) -> tuple[float, int]:
    """One lookup of the edge's name: (ns, queries sent). `drop`: the share of queries the resolver
    never answers (each waits the platform's timeout, then the query is sent again)."""
    if cached:
        return lognormal_ms(rng, 0.6, 0.4), 0
    timeout = (5.0 if phone.platform == "android" else 1.0) * NS_PER_S
    total, sent = 0.0, 1
    while rng.random() < drop and sent < 3:
        total += timeout
        sent += 1
    recursion = lognormal_ms(rng, 35.0, 0.5) if rng.random() < 0.15 else lognormal_ms(rng, 0.8, 0.4)
    hop = phone.rtt_ms * (0.6 if phone.cellular else 0.35)
    return total + hop * NS_PER_MS * rng.lognormvariate(0.0, 0.2) + recursion, sent


def upload_ns(rng: random.Random, phone: Phone, nbytes: int, loss: float, warm: bool) -> tuple[float, int]:
    """Request headers + body from the phone until the edge has the last byte: (ns, RTO waits).
    `warm`: the connection's congestion window survived since its last transfer (no slow start)."""
    rtt_s = phone.rtt_ms / 1000.0 * rng.lognormvariate(0.0, 0.12)
    link = phone.up_mbps * 1e6 * rng.lognormvariate(0.0, 0.2)
    rate = link if loss <= 0 else min(link, MSS * 8 / rtt_s * 1.22 / math.sqrt(loss))
    window = max(4.0, link * rtt_s / 8 / MSS)  # packets in flight at the link's rate
    # slow start from 10 segments; the receiver's delayed ACKs make the window grow ~1.5x per round trip
    rounds = 0.0 if warm else max(0.0, math.log(min(nbytes / MSS, window) / 10.0, 1.5))
    seconds = rtt_s / 2 + rounds * rtt_s + nbytes * 8 / rate
    total, timeouts = seconds * NS_PER_S, 0
    packets = nbytes / MSS
    undetectable = min(1.0, 3.0 / window + 0.04)  # losses fast retransmit cannot repair
    expected = packets * loss * undetectable
    k = _poisson(rng, expected)
    for _ in range(k):
        total += rto_ns(rng, phone.rtt_ms, loss)
        timeouts += 1
    return total, timeouts


def download_ns(rng: random.Random, phone: Phone, nbytes: int, loss: float) -> float:
    """The response (a few KB of tags) from the edge's first byte to the phone's last."""
    rtt = phone.rtt_ms * NS_PER_MS * rng.lognormvariate(0.0, 0.12)
    total = rtt / 2 + nbytes * 8 / (phone.up_mbps * 4e6) * NS_PER_S
    if rng.random() < loss * 2:  # one of the response's two segments lost: nothing behind it
        total += rto_ns(rng, phone.rtt_ms, loss)
    return total


def _poisson(rng: random.Random, mean: float) -> int:
    if mean <= 0:
        return 0
    k, p, limit = 0, rng.random(), math.exp(-mean)
    while p > limit:
        k += 1
        p *= rng.random()
    return k
