"""The words tailscope uses everywhere: canonical stages and diagnosis patterns."""

from __future__ import annotations

# Canonical stages, in request order. `unattributed` is time under a request's root span that no
# child span covers.
STAGES: tuple[str, ...] = (
    "ingress",
    "queue",
    "parsing",
    "feature_hydration",
    "preprocessing",
    "model_forward",
    "postprocessing",
    "downstream",
    "serialization",
)
UNATTRIBUTED = "unattributed"
ALL_STAGES: tuple[str, ...] = (*STAGES, UNATTRIBUTED)

# Causes of a latency tail the diagnosis can name.
PATTERNS: tuple[str, ...] = (
    "gc_pause",
    "lock_contention",
    "queueing",
    "cache_miss",
    "cold_start",
    "slow_dependency",
    "network",
    "compute_bound",
    "timeout_retry",  # a call cut short by a client deadline and made again
    "large_payload",  # a stage whose time grows with the size of what it handles
    "cpu_throttling",  # process-wide stalls from a CPU quota (cgroup CFS periods), not GC
    "unexplained_tail",  # a material tail whose mechanism is not recognised: where it goes, what is known
)

# Span attribute that states a span's stage explicitly; it wins over every other mapping rule.
STAGE_ATTRIBUTE = "tailscope.stage"

# Resource attribute with the hourly price (USD) of the hardware a run ran on, when it was given one
# (`tailscope pipeline sweep --price-per-hour`); the Compare page's cost per 1,000 inferences uses it.
PRICE_ATTRIBUTE = "tailscope.price.usd_per_hour"
