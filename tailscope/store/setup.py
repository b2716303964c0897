"""The resource attributes that describe a run's setup (device, dtype, host, versions), kept with the
run (DuckDB: runs.SetupAttributes; ClickHouse: tailscope_runs) for the run-vs-run comparison. Both
engines' writers collect them from the batches they are given."""

from __future__ import annotations

from tailscope.store.interface import SpanBatch

# Resource attributes that describe a run's setup and are kept in runs.SetupAttributes.
SETUP_KEYS = frozenset(
    {
        "host.name", "host.arch", "host.type", "os.type", "os.description",
        "service.version", "service.namespace", "deployment.environment", "deployment.environment.name",
        "process.runtime.name", "process.runtime.version", "telemetry.sdk.language", "telemetry.sdk.version",
        "cloud.provider", "cloud.region", "cloud.instance.type", "k8s.node.name",
    }
)  # fmt: skip
SETUP_PREFIXES = ("tailscope.",)
SETUP_WORDS = ("device", "gpu", "dtype", "batch")


def setup_attributes(batch: SpanBatch, into: dict[str, set[str]]) -> None:
    """Collect the setup-describing resource attributes of a batch (each resource looked at once)."""
    for attrs in batch.unique_resources():
        for key, value in attrs.items():
            if (
                key in SETUP_KEYS
                or key.startswith(SETUP_PREFIXES)
                or any(word in key for word in SETUP_WORDS)
            ):
                into.setdefault(key, set()).add(value)
